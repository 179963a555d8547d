"""A slow but healthy reward is never killed: calls are sized from the measured cost per item."""

from __future__ import annotations

import uuid

import pytest
import ray

from actors.pool.config import PoolConfig, chunks_for_cost, item_deadline_s
from actors.pool.reward_pool import RewardPool
from examples.rewards.misbehaving import SLOW_S
from rewards import RewardConfig
from rewards.config import UserRewardSpec

SLOW = RewardConfig(user=[UserRewardSpec(fn="examples.rewards.misbehaving:slow")])
FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"


def test_chunk_size_follows_the_measured_cost():
    cfg = PoolConfig(chunk_timeout_s=10.0, chunk_size=16, min_chunk_size=16)
    slow = chunks_for_cost(cfg, 2.0)  # 2 s an item: a call of 1 item takes a fifth of its deadline
    assert (slow.chunk_size, slow.min_chunk_size) == (1, 1)
    assert chunks_for_cost(cfg, 0.5).chunk_size == 5
    assert chunks_for_cost(cfg, 1e-5) is cfg  # cheap rewards keep the configured sizes
    assert item_deadline_s(PoolConfig(chunk_timeout_s=3.0)) == 3.0


@pytest.mark.usefixtures("ray_cluster")
def test_a_slow_healthy_reward_is_never_killed():
    items = 8
    base = {"num_workers": 2, "chunk_timeout_s": 4 * SLOW_S, "chunk_size": items, "min_chunk_size": items,
            "name_prefix": f"slow-{uuid.uuid4().hex[:6]}"}  # fmt: skip
    cfg = chunks_for_cost(PoolConfig(**base), SLOW_S)  # unsized, one call of 8 items takes 2x its deadline
    with RewardPool.create(SLOW, cfg, run_id="test") as pool:
        rewards = pool.collect([pool.submit([FEN] * items, [FEN] * items)], timeout_s=60)
        scored = [ray.get(h.items_done.remote(), timeout=30) for h in pool.worker_handles()]
        restarts = pool.stats()["worker_restarts"]
    assert rewards.statuses == ["ok"] * items
    assert rewards.stats["reward_deadline_kills"] == 0 and rewards.stats["reward_retries"] == 0
    assert sum(scored) == items and restarts == 0  # nothing scored twice, by the workers' own count
