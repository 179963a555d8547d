"""Bad input never crashes the service: configs, the command line, completions, data files."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import types
import typing

import pytest
import ray
import yaml
from fault_runs import REPO, clean_env, read_rows, summary
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from actors.pool.reward_pool import RewardPool
from bench.pool_workload import realistic_batch
from rewards import BAD_INPUT, STATUSES, TOO_LONG, score, score_batch
from service.config import ConfigError, ServiceConfig, load_config
from trainer.data.chess_games import load_pgn
from trainer.data.pairs import load_jsonl

FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# --------------------------------------------------------------------------- configs


def _model_of(annotation: typing.Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return next((m for a in typing.get_args(annotation) if (m := _model_of(a))), None)
    return None


def schema_paths(model: type[BaseModel] = ServiceConfig, prefix: str = "") -> set[str]:
    """Every dotted path of the config: sections and values."""
    paths = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.add(path)
        if (inner := _model_of(field.annotation)) is not None:
            paths |= schema_paths(inner, path + ".")
    return paths


SCHEMA_PATHS = frozenset(schema_paths())
_DOTTED = re.compile(r"[A-Za-z_][\w]*(?:\.[\w]+)*")

identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
dotted_keys = st.one_of(
    st.sampled_from(sorted(SCHEMA_PATHS)),
    st.lists(identifiers, min_size=1, max_size=4).map(".".join),
    st.tuples(st.sampled_from(sorted(SCHEMA_PATHS)), identifiers).map(".".join),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["smoke", "jsonl", "pgn", "bf16", "drop_group", "token", "group", "none", "-1", "1e9"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(identifiers, inner, max_size=3),
    max_leaves=6,
)


def as_override(key: str, value: typing.Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9)
    return f"{key}={text.removesuffix('...' + chr(10)).strip()}"


def assert_accepted_or_one_line(call: typing.Callable[[], ServiceConfig], keys: list[str]) -> None:
    """`call()` gives a config, or a ConfigError of one line that names a key (or the file)."""
    try:
        cfg = call()
    except ConfigError as exc:
        message = str(exc)
        assert message and "\n" not in message and "\r" not in message, repr(message)
        known = SCHEMA_PATHS | set(keys)  # or an entry of a map key: 'pool.resources.gpu_a'
        named = {k for k in _DOTTED.findall(message) if k in known or k.rpartition(".")[0] in known}
        assert named or message.startswith(("--config ", "--set ")), f"names no key: {message!r}"
    else:
        assert isinstance(cfg, ServiceConfig)


@FUZZ
@given(st.dictionaries(dotted_keys, values, max_size=5), st.booleans())
def test_any_dotted_overrides_are_accepted_or_refused_in_one_line(overrides, raw_text):
    items = [as_override(k, v) for k, v in overrides.items()]
    if raw_text:  # the value as typed, not as YAML would write it
        items = [f"{k}={v}" for k, v in overrides.items()]
    assert_accepted_or_one_line(lambda: load_config("smoke", None, items), list(overrides))


@FUZZ
@given(
    st.one_of(
        st.text(max_size=300),
        st.dictionaries(st.sampled_from(sorted(SCHEMA_PATHS)) | identifiers, values, max_size=6).map(
            lambda d: yaml.safe_dump(d, allow_unicode=True)
        ),
        st.dictionaries(identifiers, st.dictionaries(identifiers, values, max_size=4), max_size=4).map(
            yaml.safe_dump
        ),
    )
)
@example(text="task: 1")  # a section given as a number or a string
@example(text="task: ;")
def test_any_yaml_file_is_accepted_or_refused_in_one_line(tmp_path, text):
    path = tmp_path / "random.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    assert_accepted_or_one_line(lambda: load_config("smoke", str(path), []), [])


@pytest.mark.parametrize(
    "args",
    [
        ["--set", "bad.key=1"],
        ["--set", "grpo.steps=-1"],
        ["--set", "sft.batch_size=7", "--set", "scaling.num_workers=2"],
        ["--config", "/nonexistent/run.yaml"],
    ],
    ids=["unknown-key", "out-of-range", "cross-field", "missing-file"],
)
def test_the_command_line_refuses_bad_config_in_one_line_without_a_traceback(args, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "service.train", "--run-dir", str(tmp_path / "run"), *args],
        cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stderr.startswith("config error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was written


# --------------------------------------------------------------------------- completions

EDGE_COMPLETIONS: list[typing.Any] = [
    "",
    "\x00",
    FEN.replace(" ", "\x00"),
    FEN + "\x00",
    "\ud800\udfff lone surrogates",
    "é" * 100 + "🙂" * 100,
    "x" * 1_000_000,
    FEN + " " * 1_000_000,  # 1 MB that strips to a valid FEN
    None,
    3,
    float("nan"),
    b"bytes",
    ["list"],
    {"dict": 1},
    True,
    FEN,
]
anything = st.one_of(
    st.text(alphabet=st.characters(codec=None), max_size=600),
    st.binary(max_size=50),
    st.none(),
    st.integers(),
    st.floats(),
    st.lists(st.integers(), max_size=3),
)


def assert_explicit(result: typing.Any, completion: typing.Any) -> None:
    assert result.status in STATUSES
    assert isinstance(result.total, float) and result.total == result.total  # finite, never NaN
    if not isinstance(completion, str):
        assert result.status == BAD_INPUT and result.reason
    elif len(completion.strip()) > 512:
        assert result.status == TOO_LONG


@FUZZ
@given(st.lists(anything, max_size=20), st.sampled_from([FEN, "", "not a fen", "\x00"]))
def test_any_completion_gets_an_explicit_status(completions, target):
    batch = score_batch(completions, [target] * len(completions))
    for completion, result in zip(completions, batch, strict=True):
        assert result == score(completion, target)
        assert_explicit(result, completion)


def test_edge_completions_get_an_explicit_status():
    for completion in EDGE_COMPLETIONS:
        assert_explicit(score(completion, FEN), completion)
    assert score(FEN, None).status == BAD_INPUT  # a bad target too


@pytest.fixture(scope="module")
def pool():
    if ray.is_initialized():
        pytest.skip("another Ray session is already running in this process")
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        cfg = {"num_workers": 2, "cpus_per_worker": 0.5, "min_chunk_size": 1, "name_prefix": "fault-inputs"}
        with RewardPool.create(None, cfg, run_id="fault-inputs") as reward_pool:
            yield reward_pool
    finally:
        ray.shutdown()


def test_edge_completions_through_the_reward_pool_score_as_in_process(pool):
    targets = [FEN] * len(EDGE_COMPLETIONS)
    assert pool.score(EDGE_COMPLETIONS, targets) == score_batch(EDGE_COMPLETIONS, targets)
    rewards = pool.collect([pool.submit(EDGE_COMPLETIONS, targets)])
    assert rewards.statuses == [r.status for r in score_batch(EDGE_COMPLETIONS, targets)]


def test_an_item_that_cannot_be_sent_is_refused_at_submit_and_the_pool_goes_on(pool):
    completions, targets = realistic_batch(8000, seed=3)  # 8 chunks: every worker busy, some queued
    busy = pool.submit(completions, targets)
    with pytest.raises(TypeError, match=r"items \[0:\d+\] cannot be sent"):
        pool.submit([threading.Lock(), FEN], [FEN, FEN])  # cannot be pickled
    assert pool.collect([busy]).statuses == [r.status for r in score_batch(completions, targets)]
    assert [r.status for r in pool.score(["x", FEN], [FEN, FEN])] == ["unparsable", "ok"]


# --------------------------------------------------------------------------- data files


def test_jsonl_with_garbage_lines_loads_the_good_ones_and_reports_the_bad(train_file):
    report = load_jsonl(train_file.path)
    assert len(report.pairs) == train_file.good
    assert report.skipped == len(report.errors) == train_file.bad
    assert all(re.match(rf"{re.escape(str(train_file.path))}:\d+: \S", e) for e in report.errors)


@FUZZ
@given(st.lists(st.binary(max_size=80).filter(lambda b: b"\n" not in b), max_size=12))
def test_jsonl_with_any_bad_bytes_between_good_lines_never_loses_a_good_one(tmp_path, junk):
    good = [f'{{"prompt": "e4", "target": "{FEN}", "n": {i}}}'.encode() for i in range(len(junk) + 1)]
    lines = [line for pair in zip(good, [*junk, b""], strict=True) for line in pair]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines))
    report = load_jsonl(path)
    assert len(report.pairs) >= len(good)  # a junk line may itself be a valid record, never fewer
    assert report.skipped == len(report.errors)


PGN_GOOD = '[Event "good {n}"]\n\n1. {first} e5 2. Nf3 *\n\n'
PGN_BAD = [
    '[Event "illegal"]\n\n1. e4 e4 *\n\n',
    '[Event "custom start"]\n[SetUp "1"]\n[FEN "8/8/8/8/8/8/8/K6k w - - 0 1"]\n\n1. Kb1 *\n\n',
    '[Event "no moves"]\n\n*\n\n',
    "this line is not PGN at all\n\n",
    "\xff\xfe\x00\x01 binary junk\n\n",
]


def test_pgn_with_garbage_loads_every_good_game_and_reports_each_bad_one(tmp_path):
    parts, bad_lines, line = [], [], 1
    for i, bad in enumerate(PGN_BAD):
        for text, is_bad in ((PGN_GOOD.format(n=i, first=("e4", "d4", "c4")[i % 3]), False), (bad, True)):
            if is_bad:
                bad_lines.append(line)
            parts.append(text)
            line += text.count("\n")
    path = tmp_path / "games.pgn"
    path.write_bytes("".join(parts).encode("latin-1"))
    report = load_pgn(path, min_plies=1, max_plies=3)
    assert len(report.pairs) == 3 * len(PGN_BAD)  # 3 prefixes of each good game
    assert report.skipped == len(PGN_BAD)
    assert [int(e.split(":")[1]) for e in report.errors] == bad_lines


@pytest.mark.slow
def test_a_run_on_a_file_with_bad_lines_logs_the_report_and_trains(reference_run, train_file):
    assert reference_run.returncode == 0, reference_run.output[-3000:]
    assert summary(reference_run.run_dir)["status"] == "succeeded"
    logged = [line for line in reference_run.output.splitlines() if line.startswith("[data] ")]
    assert any(
        f"skipped {train_file.bad} bad records; first: {train_file.path}:" in line for line in logged
    ), logged
    steps = [row["step"] for row in read_rows(reference_run.run_dir / "metrics.jsonl")]
    assert steps == list(range(1, len(steps) + 1)) and steps


def test_a_file_with_no_good_line_is_refused_in_one_line(tmp_path):
    path = tmp_path / "all-bad.jsonl"
    path.write_bytes(b"not json\n\xff\xfe\n[1, 2]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "service.train", "--preset", "smoke", "--run-dir", str(tmp_path / "run"),
         "--set", "task.source=jsonl", "--set", f"task.path={path}"],
        cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "task.path" in proc.stderr, proc.stderr
