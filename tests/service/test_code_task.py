"""The `code` task: its rows in three shapes, the bundled problems, its refusals (a bad row as
file:line, no sandbox in seconds) and its held-out figures."""

from __future__ import annotations

import json
import re

import pytest

from rewards import INVALID, OK, ScoreResult
from service.config import ConfigError, load_config
from service.tasks import CodeTask, build_task
from service.tasks.code import code_figures
from service.tasks.code_data import FAMILY, generated_rows, load_code_rows
from service.train import main
from trainer.data.pairs import DataFileError

MBPP = {"prompt": "Write f.", "code": "def f(x): return x", "test_list": ["assert f(1) == 1"]}
HUMAN_EVAL = {"prompt": "def g(x):\n", "test": "def check(c):\n    assert c(1) == 1\n", "entry_point": "g"}
STDIO = {"prompt": "Echo.", "tests": [{"input": "1\n", "output": "1\n"}]}


def _write(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def sandbox_works(monkeypatch):
    """The task believes the sandbox works here (nothing in these tests runs a program)."""
    monkeypatch.setattr("rewards.sandbox.sandbox_unavailable_reason", lambda method="auto": None)


def test_rows_in_the_three_shapes_become_item_fields(tmp_path):
    setup = {**MBPP, "test_setup_code": "import math"}  # MBPP's spelling of test_setup
    path = _write(tmp_path / "rows.jsonl", [setup, HUMAN_EVAL, "", STDIO])
    rows = load_code_rows(path, target_key="code")
    assert [r.where for r in rows] == [f"{path}:1", f"{path}:2", f"{path}:4"]
    assert rows[0].target == "def f(x): return x"
    assert rows[0].fields == {"test_list": ["assert f(1) == 1"], "test_setup": "import math"}
    assert rows[1].target is None
    assert rows[1].fields == {"test": HUMAN_EVAL["test"], "entry_point": "g", "prompt": "def g(x):\n"}
    assert rows[2].fields == {"tests": [{"input": "1\n", "output": "1\n"}]}


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"prompt": "p"}, "needs exactly one of test_list"),
        ({**MBPP, "tests": STDIO["tests"]}, "holds test_list and tests"),
        ({**HUMAN_EVAL, "entry_point": None}, "needs 'entry_point'"),
        ({**MBPP, "test_list": "assert f(1) == 1"}, "'test_list' must be a non-empty list"),
        ({**STDIO, "tests": [{"input": "1"}]}, "'tests' must be a non-empty list"),
        ({**MBPP, "prompt": 3}, "'prompt' (task.prompt_key) must be a string"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_a_bad_row_is_refused_with_its_file_and_line(tmp_path, row, reason):
    path = _write(tmp_path / "rows.jsonl", [MBPP, row, row])
    with pytest.raises(DataFileError) as caught:
        load_code_rows(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:2: ") and reason in message and "(and 1 more bad rows)" in message
    assert "\n" not in message


def test_a_run_with_a_bad_row_exits_2_naming_the_file_and_line(tmp_path, capsys, sandbox_works):
    path = _write(tmp_path / "rows.jsonl", [MBPP, {"prompt": "p"}])
    rc = main(["--preset", "code-smoke", "--run-dir", str(tmp_path / "run"), "--set", f"task.path={path}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert f"task.path: {path}:2: a code row needs exactly one of" in err
    assert not (tmp_path / "run").exists()


def test_without_the_sandbox_a_code_run_exits_2_before_ray_starts_naming_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        "rewards.sandbox.sandbox_unavailable_reason", lambda method="auto": "bwrap: not found on PATH"
    )
    # refused before Ray starts: in the unit tier, starting it would fail the test (tests/tiers.py)
    rc = main(["--preset", "code-smoke", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.splitlines() == [
        "config error: task.name: code runs completions in the sandbox, which is unavailable here: "
        "bwrap: not found on PATH; apt-get install bubblewrap"
    ]
    assert not (tmp_path / "run").exists()


def test_the_bundled_problems_are_deterministic_well_posed_and_short():
    held = generated_rows(7, 50)
    assert held == generated_rows(7, 50)
    train = generated_rows(3, 400, {r.prompt for r in held})
    assert not {r.prompt for r in train} & {r.prompt for r in held}
    assert len({r.prompt for r in train}) == 400
    for row in train:
        expr = row.target.removeprefix("f=lambda x:")
        assert len(row.target) <= 20 and expr in FAMILY
        shown = [tuple(map(int, m)) for m in re.findall(r"f\((\d+)\)=(-?\d+)", row.prompt)]
        assert 2 <= len(shown) <= 3
        # one answer: no other function of the family fits the examples
        assert [n for n in FAMILY if all(FAMILY[n](x) == y for x, y in shown)] == [expr]
        for line in row.fields["test_list"]:  # the checks hold for the answer, on inputs not shown
            x, y = map(int, re.fullmatch(r"assert f\((\d+)\)==(-?\d+)", line).groups())
            assert FAMILY[expr](x) == y and x not in dict(shown)


def test_the_generated_task_carries_its_tests_and_a_small_alphabet(sandbox_works):
    cfg = load_config("code-smoke")
    task = build_task(cfg)
    assert isinstance(task, CodeTask) and task.stop == ()
    held, train = task.eval_pairs(), task.training_pairs(lambda line: None)
    assert len(held) == cfg.data.eval_size and len(train) == cfg.task.train_problems
    assert all(p.fields["test_list"] and p.target.startswith("f=lambda x:") for p in train)
    assert len(task.alphabet) < 40 and set("f=lambdax:+-*/%0123456789()\n ") >= set(task.alphabet)
    scorer = task.scorer()
    assert scorer.limits.wall_s == cfg.task.time_limit_s and scorer.all_or_nothing is False


def test_file_rows_split_off_a_held_out_set(tmp_path, sandbox_works):
    rows = [{**MBPP, "prompt": f"Write f number {i}."} for i in range(12)]
    path = _write(tmp_path / "rows.jsonl", rows)
    cfg = load_config(
        "code-smoke", overrides=[f"task.path={path}", "task.target_key=code", "data.eval_size=4"]
    )
    task = build_task(cfg)
    held, train = task.eval_pairs(), task.training_pairs(lambda line: None)
    assert len(held) == 4 and len(train) == 8 and not {p.prompt for p in held} & {p.prompt for p in train}


def test_config_refusals_name_the_key():
    with pytest.raises(ConfigError, match="task.eval_path: held-out rows need training rows too"):
        load_config("code-smoke", overrides=["task.eval_path=x.jsonl"])
    with pytest.raises(ConfigError, match="all_or_nothing"):
        load_config("smoke", overrides=["task.all_or_nothing=true"])  # the fen task has no such key


def test_held_out_figures_count_full_passes_shares_and_sandbox_statuses():
    scored = [
        ScoreResult(1.0, {"passed": 4.0, "total": 4.0, "sandbox_ok": 1.0}, OK),
        ScoreResult(0.5, {"passed": 2.0, "total": 4.0, "sandbox_ok": 1.0}, OK),
        ScoreResult(0.0, {"passed": 0.0, "total": 4.0, "sandbox_timeout": 1.0}, INVALID),
        ScoreResult.failed("error", "the sandbox could not run the program"),
    ]
    assert code_figures(scored) == {
        "greedy_pass_at_1": 0.25,
        "tests_passed_mean": pytest.approx(1.5 / 4),
        "sandbox_none_rate": 0.25,
        "sandbox_ok_rate": 0.5,
        "sandbox_timeout_rate": 0.25,
    }
    assert code_figures([]) == {}


def _sandbox_reason() -> str | None:
    from rewards.sandbox import sandbox_unavailable_reason

    return sandbox_unavailable_reason()


@pytest.mark.skipif(_sandbox_reason() is not None, reason=f"no sandbox here: {_sandbox_reason()}")
def test_the_bundled_answers_pass_their_tests_in_the_sandbox():
    task = build_task(load_config("code-smoke"))
    pairs = task.eval_pairs()[:6]
    fields = [p.fields for p in pairs]
    scored = task.scorer().score_batch([p.target for p in pairs], [p.target for p in pairs], fields)
    assert [r.total for r in scored] == [1.0] * 6 and all(r.status == OK for r in scored)
    wrong = task.scorer().score("f=lambda x:x+100", None, pairs[0].fields)
    assert wrong.total == 0.0 and wrong.status == OK and wrong.components["passed"] == 0.0


def test_the_process_limit_method_reaches_the_sandbox_and_the_runs_log():
    if (reason := _sandbox_reason()) is not None:
        pytest.skip(reason)
    lines: list[str] = []
    cfg = load_config("code-smoke", overrides=["task.process_limit=uid"])
    task = build_task(cfg)
    task.training_pairs(lines.append)
    assert task.scorer().limits.process_limit == "uid"
    assert any("processes capped by uid (task.process_limit: uid)" in line for line in lines), lines
    with pytest.raises(ConfigError, match="task.process_limit"):
        load_config("code-smoke", overrides=["task.process_limit=nproc"])
