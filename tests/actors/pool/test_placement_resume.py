"""pool.placement auto: a checkpoint keeps the decision, and a resumed run continues it without probing."""

from __future__ import annotations

import uuid

import pytest

from actors.pool.config import PoolConfig
from actors.pool.placement import PROBE, PlacedRewards
from actors.pool.reward_pool import RewardPool
from bench.pool_workload import realistic_batch
from rewards import FenScorer

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _step(placed: PlacedRewards, seed: int) -> float:
    completions, targets = realistic_batch(32, seed=seed)
    return placed.collect([placed.submit(completions, targets)]).stats["placement_inline"]


def test_a_restored_decision_is_continued_without_probing_again():
    fen = FenScorer()
    cfg = PoolConfig(name_prefix=f"keep-{uuid.uuid4().hex[:6]}", num_workers=1)
    with RewardPool.create(fen, cfg, run_id="place-keep") as pool:
        first = PlacedRewards(pool, fen, "auto", log=lambda line: None)
        assert first.state_dict()["decided"] is False  # probing: nothing to keep yet
        for seed in range(len(PROBE)):
            _step(first, seed)
        kept = first.state_dict()
        assert kept["decided"] and kept["where"] == first.where and kept["chosen_ms"] is not None
        for where in ("inline", "pool"):  # whichever side the run had chosen
            resumed = PlacedRewards(pool, fen, "auto", log=lambda line: None)
            resumed.load_state_dict({**kept, "where": where})
            assert [_step(resumed, 10 + s) for s in range(2)] == [float(where == "inline")] * 2
            assert resumed.decisions == []  # no probe, no new decision
        pinned = PlacedRewards(pool, fen, "auto", log=lambda line: None)
        pinned.load_state_dict({**kept, "where": "inline", "pinned": True})  # handed over for good
        assert _step(pinned, 20) == 0.0
        fixed = PlacedRewards(pool, fen, "pool", log=lambda line: None)
        fixed.load_state_dict({**kept, "where": "inline"})  # a placement set in the config stays the config's
        assert _step(fixed, 21) == 0.0
        first.shutdown()
