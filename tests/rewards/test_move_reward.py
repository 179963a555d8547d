"""The engine-scored move reward: tiers, the engine's judgement, repeatability, and the engine's life."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import chess
import pytest

from rewards import INVALID, OK, UNPARSABLE, EngineConfig, MoveScorer
from rewards.engine import EngineJudge, EngineUnavailable, find_engine
from rewards.move import ILLEGAL_REWARD, LEGAL_FLOOR
from tests.rewards.engine_needed import needs_engine

REPO = Path(__file__).resolve().parents[2]
START = chess.STARTING_FEN
# 1.d4 d5 2.Nf3 Nf6: both knights reach d2, so "Nd2" is ambiguous and "Nbd2" is a move.
TWO_KNIGHTS = "rnbqkb1r/ppp1pppp/5n2/3p4/3P4/5N2/PPP1PPPP/RNBQKB1R w KQkq - 2 3"
# 1.e4 e5 2.Qh5 Nc6 3.Bc4: Black must stop Qxf7#; a3-style moves lose at once.
MATE_THREAT = "r1bqkbnr/pppp1ppp/2n5/4p2Q/2B1P3/8/PPPP1PPP/RNB1K1NR b KQkq - 3 3"
FAST = EngineConfig(nodes=300)


@pytest.fixture(scope="module")
def scorer():
    s = MoveScorer(engine=FAST)
    yield s
    s.close()


def _score(scorer, move: str, fen: str = START):
    return scorer.score(move, None, {"fen": fen})


@needs_engine
def test_tiers_unparsable_below_illegal_below_legal(scorer):
    garbage, illegal, legal = (_score(scorer, m) for m in ("zz9", "e5", "a3"))
    assert (garbage.status, garbage.total) == (UNPARSABLE, 0.0)
    assert (illegal.status, illegal.total) == (INVALID, ILLEGAL_REWARD)
    assert legal.status == OK and LEGAL_FLOOR < legal.total <= 1.0
    assert legal.components["legal"] == 1.0 and illegal.components == {"legal": 0.0}
    assert _score(scorer, "Nd2", TWO_KNIGHTS).status == INVALID  # ambiguous: not a move
    assert _score(scorer, "Nbd2", TWO_KNIGHTS).status == OK


@needs_engine
def test_the_engine_move_scores_one_and_a_blunder_scores_less(scorer):
    board = chess.Board(MATE_THREAT)
    best = board.san(scorer.best(board).move)
    top = _score(scorer, best, MATE_THREAT)
    assert top.total == 1.0 and top.components["cp_loss"] == 0.0
    blunder = _score(scorer, "a6", MATE_THREAT)  # allows Qxf7#: capped at max_cp_loss
    assert blunder.status == OK and blunder.components["cp_loss"] == FAST.max_cp_loss
    assert LEGAL_FLOOR < blunder.total < top.total


@needs_engine
def test_judgements_repeat_exactly_in_any_order_and_process():
    fens = [
        START,
        MATE_THREAT,
        TWO_KNIGHTS,
        "r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3",
    ]
    moves = ["e4", "a3", "Nc3", "h4", "Bb5", "d4", "g6", "Nbd2", "a6"]
    items = [(m, f) for f in fens for m in moves]
    first = MoveScorer(engine=FAST)
    second = pickle.loads(pickle.dumps(first))  # what a reward worker gets: its own engine
    try:
        a = [first.score(m, None, {"fen": f}) for m, f in items]
        b = [second.score(m, None, {"fen": f}) for m, f in reversed(items)][::-1]
        assert a == b and any(r.status == OK and 0 < r.components["cp_loss"] for r in a)
        assert first.judge.pid != second.judge.pid
    finally:
        first.close(), second.close()


@needs_engine
def test_an_item_without_its_position_is_an_error_not_a_zero(scorer):
    result = scorer.score("e4", None, None)
    assert result.status == "error" and "fen" in result.reason


def test_a_missing_engine_is_one_clear_line():
    with pytest.raises(EngineUnavailable, match=r"^task\.engine\.path: '/nonexistent/stockfish' .*install"):
        find_engine("/nonexistent/stockfish")
    judge = EngineJudge(EngineConfig(path="/nonexistent/stockfish"))
    with pytest.raises(EngineUnavailable):
        judge.best(chess.Board())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


@needs_engine
@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the engine's parent-death signal is Linux's"
)
def test_the_engine_dies_with_its_process_even_by_kill_9():
    code = (
        "import sys, chess; from rewards import EngineConfig; from rewards.engine import EngineJudge\n"
        "j = EngineJudge(EngineConfig(nodes=100)); j.best(chess.Board()); print(j.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        engine_pid = int(proc.stdout.readline())
        assert _alive(engine_pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while _alive(engine_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(engine_pid)
    finally:
        proc.kill()
