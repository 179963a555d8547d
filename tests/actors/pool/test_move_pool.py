"""The engine-scored reward on a real pool: one engine per worker, and kill -9 of a worker mid-batch
takes its engine with it, brings a new one, and changes no reward."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import chess
import pytest

from actors.pool.config import PoolConfig
from actors.pool.reward_pool import RewardPool
from rewards import EngineConfig, MoveScorer
from tests.rewards.engine_needed import needs_engine
from trainer.data.chess_games import generate_pairs

pytestmark = [pytest.mark.usefixtures("ray_cluster"), needs_engine]


def _engines_of(pid: int) -> list[int]:
    """Engine processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        comm, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        if "stockfish" in comm and int(rest[1]) == pid and rest[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _wait(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _items(n_positions: int) -> tuple[list[str], list[dict[str, str]]]:
    """Every legal move of n generated positions (SAN), each with its position."""
    completions, fields = [], []
    for pair in generate_pairs(n_positions, seed=3, min_plies=2, max_plies=6):
        board = chess.Board(pair.target)
        for move in sorted(board.legal_moves, key=lambda m: m.uci())[:8]:
            completions.append(board.san(move))
            fields.append({"fen": pair.target})
    return completions, fields


@pytest.mark.slow
def test_kill_9_of_a_worker_takes_its_engine_and_changes_no_reward():
    scorer = MoveScorer(engine=EngineConfig(nodes=300))
    completions, fields = _items(30)
    targets = [None] * len(completions)
    try:
        expected = scorer.score_batch(completions, targets, fields)  # the fault-free results
    finally:
        scorer.close()
    cfg = PoolConfig(name_prefix=f"move-{uuid.uuid4().hex[:6]}", num_workers=2, chunk_size=16,
                     min_chunk_size=8, chunk_timeout_s=60)  # fmt: skip
    with RewardPool.create(scorer, cfg, run_id="move-kill") as pool:
        pids = pool.worker_pids()
        engines = {name: _engines_of(pid) for name, pid in pids.items()}
        assert all(len(e) == 1 for e in engines.values()), engines  # one engine per worker, from the start
        victim = pool.worker_names()[0]
        ticket = pool.submit(completions, targets, fields=fields)
        assert _wait(lambda: pool.stats()["items_scored"] > 0, 60)
        os.kill(pids[victim], signal.SIGKILL)
        assert pool.collect_results([ticket]) == expected
        assert _wait(lambda: not any(Path(f"/proc/{p}").exists() for p in engines[victim]), 10)
        assert _wait(lambda: pool.worker_pids()[victim] not in (pids[victim], None), 60)
        new_pid = pool.worker_pids()[victim]
        new_engines = _engines_of(new_pid)
        assert len(new_engines) == 1 and new_engines != engines[victim]
        assert pool.score(completions[:40], targets[:40], fields[:40]) == expected[:40]
