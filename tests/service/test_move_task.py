"""The `move` task: engine-chosen targets (cached), a held-out set apart from training, its figures,
its refusal without an engine, and `move-smoke` end to end."""

from __future__ import annotations

import json
import math

import chess
import pytest

from rewards import OK, ScoreResult
from rewards.engine import EngineJudge
from service.config import load_config
from service.tasks import MoveTask, build_task
from service.tasks.move import move_figures
from service.tasks.move_data import cache_dir
from tests.rewards.engine_needed import needs_engine
from tests.service.train_child import assert_ran, run_train, shared_env
from trainer.data.chess_games import position_key
from trainer.policy.char_tokenizer import CharTokenizer


@pytest.fixture
def move_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


@needs_engine
def test_pairs_hold_the_engine_move_are_cached_and_stay_apart_from_held_out(move_cache):
    cfg = load_config("move-smoke", overrides=["task.train_positions=12", "data.eval_size=8"])
    task = build_task(cfg)
    assert isinstance(task, MoveTask)
    train = task.training_pairs(lambda line: None)
    held = task.eval_pairs()
    assert len(train) == 12 and len({p.prompt for p in train}) == 12 and len(held) == 8
    assert not {position_key(p.prompt) for p in train} & {position_key(p.prompt) for p in held}
    judge = EngineJudge(cfg.task.engine)
    try:
        for pair in train[:4] + held[:4]:
            board = chess.Board(pair.prompt)
            assert pair.fields == {"fen": pair.prompt} and pair.target == board.san(judge.best(board).move)
    finally:
        judge.close()
    tok = CharTokenizer(task.alphabet)
    for pair in train + held:
        tok.encode(pair.prompt), tok.encode(pair.target)
    assert len(list(cache_dir().glob("*.json"))) == 2
    # from the cache: a search would say so first (its log line fails the test)
    assert task.training_pairs(lambda line: pytest.fail(f"searched again: {line}")) == train
    scorer = task.scorer()
    try:  # the reference move scores full marks: the engine agrees with itself
        assert scorer.score(train[0].target, train[0].target, train[0].fields).total == 1.0
    finally:
        scorer.close()


def test_held_out_figures_from_scored_moves():
    legal = [ScoreResult(0.9, {"legal": 1.0, "quality": 0.8, "cp_loss": 25.0}, OK),
             ScoreResult(1.0, {"legal": 1.0, "quality": 1.0, "cp_loss": 0.0}, OK)]  # fmt: skip
    bad = [ScoreResult(0.2, {"legal": 0.0}, "invalid"), ScoreResult.failed("timeout", "slow")]
    figures = move_figures(legal + bad, forfeit_cp=1000.0)
    assert figures == {
        "legal_rate": 0.5,
        "cp_loss_mean": 506.25,
        "cp_loss_legal_mean": 12.5,
        "best_move_rate": 0.25,
    }
    assert math.isnan(move_figures(bad, 1000.0)["cp_loss_legal_mean"]) and move_figures([], 1000.0) == {}


def test_without_an_engine_the_run_refuses_to_start_in_one_line(tmp_path):
    args = ("--preset", "move-smoke", "--run-dir", str(tmp_path / "r"))
    result = run_train(*args, sets=["task.engine.path=/nonexistent/stockfish"], timeout=120)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "task.engine.path" in lines[0] and "apt-get install stockfish" in lines[0]
    assert not (tmp_path / "r").exists()


@needs_engine
@pytest.mark.slow
def test_move_smoke_runs_end_to_end_with_the_move_figures(tmp_path, move_cache):
    run_dir = tmp_path / "move"
    # in process (run.backend=local): this checks the move task's figures; Ray Train's own path is
    # the smoke runs'
    args = ("--preset", "move-smoke", "--run-dir", str(run_dir))
    assert_ran(run_train(*args, sets=["run.backend=local"], env=shared_env(), timeout=400))
    evals = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert evals and all(
        {"legal_rate", "cp_loss_mean", "cp_loss_legal_mean", "best_move_rate"} <= set(e) for e in evals
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded"
