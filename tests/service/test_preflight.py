"""Runs refused before anything starts: data that cannot tokenize or fit, rewards that cannot be
used, config relations; from `python -m service.train` and from the client's `submit`. Each is one
line, exit 2, no run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.client.checks import modules_to_ship
from service.client.cli import main as client_main
from service.config import ConfigError, load_config
from tests.service.refusals import refused
from tests.service.train_child import run_train
from trainer.data.chess_games import eval_pairs, generate_pairs

REPO = Path(__file__).resolve().parents[2]
EX = "examples.rewards.misbehaving"


def _reward(name: str) -> str:
    return f"reward.user=[{{fn: '{EX}:{name}'}}]"


def _game_rows() -> list[dict[str, str]]:
    # Training games never hold a held-out position; a file's held-out set comes from the file.
    pairs = generate_pairs(280, seed=3, min_plies=1, max_plies=2) + eval_pairs(20, 1_000_003, 1, 2)
    return [{"prompt": p.prompt, "target": p.target} for p in pairs]


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    """300 JSONL records of the FEN task; line 137's prompt holds a character no chess text has."""
    rows = _game_rows()
    rows[136]["prompt"] += " \u2014 good"
    return _write(tmp_path_factory.mktemp("data") / "games.jsonl", rows)


def _refused(capsys, tmp_path: Path, *sets: str) -> str:
    return refused(capsys, tmp_path, "smoke", *sets)


def test_an_unencodable_record_among_300_is_refused_with_its_line(capsys, tmp_path, games):
    err = _refused(capsys, tmp_path, f"task.path={games}")  # the source comes from the extension
    assert f"task.path: {games}:137: prompt character '\u2014'" in err


def test_a_record_longer_than_the_block_is_refused_with_its_line(capsys, tmp_path):
    rows = _game_rows()
    rows[3]["prompt"] = " ".join(["e4"] * 40)  # 119 characters: + BOS/SEP + 72 new tokens > 128
    path = _write(tmp_path / "long.jsonl", rows)
    err = _refused(capsys, tmp_path, f"task.path={path}")
    assert f"{path}:4: prompt of 119 characters" in err and "model.block_size (128)" in err


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["sampling.max_new_tokens=100000"], "sampling.max_new_tokens: 100000 is too large"),
        ([_reward("always_raises")], "every one of 8 sample items failed"),
        ([_reward("not_a_number")], "returned str 'high', not a number"),
        ([_reward("nope")], "has no attribute 'nope'"),
        (["run.num_cpus=1", "pool.num_workers=3"], "run.num_cpus: 1 is below the 3 CPUs"),
        (["scaling.use_gpu=true"], "scaling.use_gpu: true, but this machine has no CUDA"),
        (["run.storage_path=/proc/no-such-dir"], "run.storage_path: '/proc/no-such-dir' cannot be written"),
        (["task.path=games.txt"], "set task.source (pgn or jsonl)"),
    ],
)
def test_refused_before_anything_starts(capsys, tmp_path, sets, expected):
    if "scaling.use_gpu=true" in sets:
        pytest.importorskip("torch").cuda.is_available() and pytest.skip("this machine has CUDA")
    assert expected in _refused(capsys, tmp_path, *sets)


def test_a_slow_reward_beyond_the_items_deadline_is_refused(capsys, tmp_path, monkeypatch):
    # 0.2 s an item (examples/rewards) against a deadline of 0.05 s for an item.
    err = _refused(
        capsys, tmp_path, _reward("slow"), "pool.chunk_timeout_s=0.05", "pool.collect_timeout_s=600"
    )
    assert "sample item 1 (completion " in err and "did not return within 0.05s" in err


def test_a_reward_failing_on_some_items_passes(tmp_path):
    from service.preflight import check_run
    from service.tasks import build_task

    cfg = load_config("smoke", overrides=[_reward("raises_one_in_six")])
    task = build_task(cfg)
    pool = check_run(cfg, task, task.eval_pairs(), None, driver=False)
    # the pool to run with: the configured one, its calls fitted to the cost measured on this machine
    # (which sizes a cost gives is chunks_for_cost's rule, fed known costs in test_pool_deadlines.py)
    sizes = {"chunk_size", "min_chunk_size"}
    assert pool.model_dump(exclude=sizes) == cfg.pool.model_dump(exclude=sizes)


def test_data_path_source_comes_from_the_extension(games):
    assert load_config("smoke", overrides=[f"task.path={games}"]).task.source == "jsonl"
    with pytest.raises(ConfigError, match="read only with source pgn or jsonl"):
        load_config("smoke", overrides=["task.source=generated", f"task.path={games}"])


def test_the_command_line_refuses_before_anything_starts(tmp_path):
    run_dir = tmp_path / "run"
    # the timeout is only a guard against a hang: imports and a few scored items take ~2 s idle
    proc = run_train(
        "--preset", "smoke", "--run-dir", str(run_dir), sets=[_reward("always_raises")], timeout=120
    )
    # its one line is all it printed (no Ray started, no run directory made)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stdout == "", proc.stderr
    assert "every one of 8 sample items failed" in proc.stderr and not run_dir.exists()


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["sampling.max_new_tokens=100000"], "sampling.max_new_tokens: 100000 is too large"),
        ([_reward("always_raises")], "every one of 8 sample items failed"),
        (["run.num_cpus=1", "pool.num_workers=3"], "run.num_cpus: 1 is below"),
    ],
)
def test_submit_refuses_before_any_request(capsys, monkeypatch, sets, expected):
    from test_client_cli import closed_port_address  # a request would be exit 3

    monkeypatch.chdir(REPO)
    argv = ["submit", "--address", closed_port_address(), "--preset", "smoke"]
    for item in sets:
        argv += ["--set", item]
    assert client_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err


def test_submit_refuses_unencodable_data(capsys, monkeypatch, games):
    from test_client_cli import closed_port_address

    monkeypatch.chdir(REPO)
    argv = ["submit", "--address", closed_port_address(), "--preset", "smoke", "--set", f"task.path={games}"]
    assert client_main(argv) == 2
    assert f"{games}:137: prompt character" in capsys.readouterr().err


def test_reward_modules_outside_the_working_dir_are_shipped_or_refused(tmp_path, monkeypatch):
    outside = tmp_path / "elsewhere" / "upkg"
    outside.mkdir(parents=True)
    (outside / "__init__.py").write_text("def reward(completion, target):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(outside.parent))
    shipped = load_config("smoke", overrides=["reward.user=[{fn: 'upkg:reward'}]"])
    assert modules_to_ship(shipped, REPO) == [str(outside)]
    assert modules_to_ship(shipped, None) == []  # no upload: the cluster's image holds the code
    in_tree = load_config("smoke", overrides=[_reward("slow")])
    assert modules_to_ship(in_tree, REPO) == []  # examples/ is uploaded with the working dir
    missing = load_config("smoke", overrides=["reward.user=[{fn: 'nopkg_here.mod:fn'}]"])
    with pytest.raises(ValueError, match="module 'nopkg_here' cannot be imported on this machine"):
        modules_to_ship(missing, REPO)


def test_submit_leaves_an_engine_task_to_the_cluster(monkeypatch):
    from service.client.submission import build_submission

    monkeypatch.chdir(REPO)
    # No engine at that path here; the cluster's image has one: the submission is built anyway.
    submission = build_submission(
        run_id="move-1", preset="move-smoke", config_file=None, overrides=["task.engine.path=/nonexistent/stockfish"],
        run_dir=None, working_dir=REPO, env_vars=None,
    )  # fmt: skip
    assert "--preset move-smoke" in submission.entrypoint


def test_nan_on_a_third_of_items_is_refused_as_a_grpo_step_would_fail(capsys, tmp_path):
    from actors.pool.failure_policy import BatchCounts, error_rate_problem
    from service.check_reward import main as check_reward_main
    from service.preflight import PREFLIGHT_RATE_ITEMS

    err = _refused(capsys, tmp_path, _reward("nan_one_in_three"))
    # 8 items measure a share too coarsely: when some fail, the preflight measures 64.
    assert "rewards failed" in err and "pool.error_rate_threshold=0.25" in err and "non-finite nan" in err
    failed = int(err.split(" of 64 rewards failed")[0].rsplit(" ", 1)[-1])
    assert error_rate_problem(BatchCounts(PREFLIGHT_RATE_ITEMS, errors=failed), 0.25) in err
    # check_reward on the same sample says the same.
    assert check_reward_main(["--preset", "smoke", "--n", "64", "--set", _reward("nan_one_in_three")]) == 2
    assert (
        error_rate_problem(BatchCounts(PREFLIGHT_RATE_ITEMS, errors=failed), 0.25) in capsys.readouterr().out
    )
