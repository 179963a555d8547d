"""Rewards that wait or hold state, on a real local Ray cluster: async def rewards scored side by side
with a per-item deadline, plain blocking rewards on threads, and class rewards set up once per worker."""

from __future__ import annotations

import uuid

import pytest

from actors.pool.config import PoolConfig
from actors.pool.reward_pool import RewardPool
from rewards import TIMEOUT, RewardConfig
from rewards.config import UserRewardSpec

pytestmark = pytest.mark.usefixtures("ray_cluster")

FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"


def _user(fn: str, **kw) -> RewardConfig:
    return RewardConfig(user=[UserRewardSpec(fn=f"user_rewards:{fn}", **kw)])


def _cfg(**kw) -> PoolConfig:
    return PoolConfig(**{"name_prefix": f"wait-{uuid.uuid4().hex[:6]}", "num_workers": 2, **kw})


@pytest.mark.parametrize(("fn", "threads"), [("waits_for_company", False), ("blocks_for_company", True)])
def test_waiting_rewards_score_side_by_side(fn, threads):
    reward = _user(fn, threads=threads)
    n = 256
    completions, targets = [FEN] * n, [FEN] * n
    with RewardPool.create(reward, _cfg(concurrency_per_worker=32), run_id="wait") as pool:
        results = pool.score(completions, targets)
    assert [r.status for r in results] == ["ok"] * n
    # each item answered only once 16 items of its worker waited at once: one by one, none would
    # have (each would have waited alone until pool.item_timeout_s cut it)
    assert {r.components[f"user_rewards:{fn}"] for r in results} == {1.0}


def test_an_async_reward_that_never_answers_is_cut_at_its_deadline_and_the_rest_score():
    reward = _user("awaits_forever_on_marker")
    completions = [FEN] * 40 + ["HANG " + FEN] + [FEN] * 40
    targets = [FEN] * len(completions)
    cfg = _cfg(chunk_timeout_s=10.0, item_timeout_s=1.0)
    with RewardPool.create(reward, cfg, run_id="async-hang") as pool:
        ticket = pool.submit(completions, targets)
        results = pool.collect_results([ticket], timeout_s=60)  # only a guard against a hang
        rewards = pool.collect([ticket])
        poison = results.pop(40)
        assert poison.status == TIMEOUT and "pool.item_timeout_s=1s" in poison.reason
        assert {r.status for r in results} == {"ok"}
        # cut inside the worker at its item deadline, before the call's (10 s): nobody was killed
        assert rewards.stats["reward_deadline_kills"] == 0 and rewards.stats["reward_retries"] == 0
        assert [r.status for r in pool.score([FEN] * 50, [FEN] * 50)] == ["ok"] * 50


@pytest.mark.slow
def test_a_class_reward_that_never_releases_its_engine_times_out_alone():
    reward = _user("HoldsItsEngine")
    cfg = _cfg(chunk_size=16, min_chunk_size=4, split_parts=4, chunk_timeout_s=1.0, max_retries=0)
    completions = [FEN] * 20 + ["HANG " + FEN] + [FEN] * 20
    targets = [FEN] * len(completions)
    with RewardPool.create(reward, cfg, run_id="engine-hang") as pool:
        results = pool.score(completions, targets)
        poison = results.pop(20)
        assert poison.status == TIMEOUT and "chunk_timeout_s=1s" in poison.reason
        assert {r.status for r in results} == {"ok"}
        assert [r.status for r in pool.score([FEN] * 50, [FEN] * 50)] == ["ok"] * 50


def test_a_class_reward_is_set_up_once_per_worker_process():
    reward = _user("CountsItsSetup")
    with RewardPool.create(reward, _cfg(num_workers=1), run_id="class") as pool:
        first = pool.score(["WHO"] * 3 + [FEN] * 100, [FEN] * 103)
        again = pool.score(["WHO"], [FEN])
    setups = {int(r.components["user_rewards:CountsItsSetup"]) // 1000 for r in first[:3] + again}
    assert setups == {1}  # one setup in that process, however many calls
