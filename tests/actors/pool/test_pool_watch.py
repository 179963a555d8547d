"""Reward workers under watch on a real local Ray cluster: a leaking reward's RSS in the pool's
health, its worker recycled past pool.max_worker_rss_mb with every item scored, a flooding
reward's output captured, capped and said once."""

from __future__ import annotations

import time
import uuid

import pytest

from actors.pool.config import PoolConfig
from actors.pool.reward_pool import RewardPool
from actors.pool.worker_watch import RssWatch
from rewards import OK, RewardConfig
from rewards.config import UserRewardSpec

pytestmark = pytest.mark.usefixtures("ray_cluster")

FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
EX = "examples.rewards.misbehaving"
LEAK = RewardConfig(user=[UserRewardSpec(fn=f"{EX}:leaks_memory")])  # keeps 1 MiB an item


def _cfg(**kw) -> PoolConfig:
    return PoolConfig(**{"name_prefix": f"watch-{uuid.uuid4().hex[:6]}", **kw})


def test_a_leaking_reward_shows_in_health_and_its_worker_is_recycled_past_the_limit():
    seen, said = [], []
    watch = RssWatch(growth_mb=40, rising_steps=3)
    with RewardPool.create(LEAK, _cfg(num_workers=1), run_id="leak") as pool:
        for step in range(1, 5):
            rewards = pool.collect([pool.submit([FEN] * 16, [FEN] * 16)])
            assert rewards.statuses == [OK] * 16
            ((_, rss),) = pool.worker_rss_mb().values()
            seen.append(rss)
            said += watch.observe(step, pool.worker_rss_mb())
        assert pool.stats()["recycled"] == 0  # no limit set
    assert all(later > earlier + 8 for earlier, later in zip(seen, seen[1:], strict=False)), seen
    assert len(said) == 1 and "leaking memory" in said[0] and "pool.max_worker_rss_mb" in said[0]

    limit = seen[0] + 40  # a fresh worker passes it after about three batches
    cfg = _cfg(num_workers=2, chunk_size=8, min_chunk_size=8, max_worker_rss_mb=limit)
    recycled = 0
    with RewardPool.create(LEAK, cfg, run_id="recycle") as pool:
        for _ in range(8):
            rewards = pool.collect([pool.submit([FEN] * 32, [FEN] * 32)])
            # nothing lost: every item scored, exact FEN (1) plus the user reward (1)
            assert rewards.statuses == [OK] * 32 and rewards.values == [2.0] * 32
            recycled += rewards.stats["worker_recycled"]
            assert rewards.stats["worker_restarts"] == 0 and rewards.stats["reward_retries"] == 0
        stats = pool.stats()
        assert recycled >= 2 and stats["recycled"] == recycled and stats["worker_restarts"] == 0
        assert sum(w["recycled"] for w in stats["workers"].values()) == recycled
        # a worker passes the limit by at most one call's leak before it is replaced
        assert all(rss is None or rss < limit + 2 * 8 for _, rss in pool.worker_rss_mb().values())
        (notice,) = pool.take_notices()
        assert "recycled" in notice and f"pool.max_worker_rss_mb={limit:g}" in notice
        assert pool.take_notices() == []


def test_a_flooding_reward_is_captured_capped_and_said_once(capfd):
    flood = RewardConfig(user=[UserRewardSpec(fn=f"{EX}:prints_a_lot")])  # 1 MiB of text an item
    with RewardPool.create(
        flood, _cfg(num_workers=2, chunk_size=4, min_chunk_size=2), run_id="flood"
    ) as pool:
        for _ in range(3):
            assert [r.status for r in pool.score([FEN] * 8, [FEN] * 8)] == [OK] * 8
        notices = pool.take_notices()
        assert len(notices) == 1 and pool.take_notices() == []
        assert "reward output (first lines): checking " in notices[0] and "more bytes dropped" in notices[0]
        assert len(notices[0]) < 2000
        assert pool.stats()["output_bytes"] >= 24 * 1024 * 1024
    time.sleep(1.0)  # Ray forwards workers' lines to the driver a moment later
    out, err = capfd.readouterr()
    assert len(out) + len(err) < 64 * 1024  # not 24 MiB of reward output
