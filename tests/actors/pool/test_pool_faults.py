"""Faults on a real local Ray cluster: a killed worker, a hanging reward, a raising reward, a crash."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from actors.pool.config import PoolConfig, max_runs_per_item, poison_item_bound_s
from actors.pool.errors import RewardErrorRateExceeded, RewardPoolUnavailable
from actors.pool.reward_pool import RewardPool
from bench.pool_workload import realistic_batch
from rewards import ERROR, TIMEOUT, FenScorer, RewardConfig
from rewards.config import UserRewardSpec

pytestmark = pytest.mark.usefixtures("ray_cluster")

FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
# Seconds a killed worker takes to come back here (~1.5 s to notice, < 1 s to start), with margin.
RESTART_ALLOWANCE_S = 4.0


def _user(fn: str) -> RewardConfig:
    return RewardConfig(user=[UserRewardSpec(fn=f"user_rewards:{fn}")])


def _cfg(**kw) -> PoolConfig:
    return PoolConfig(**{"name_prefix": f"fault-{uuid.uuid4().hex[:6]}", **kw})


def _wait(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


@pytest.mark.slow
def test_a_worker_killed_mid_batch_changes_no_reward():
    completions, targets = realistic_batch(20_000, seed=7, distinct_targets=300)
    expected = FenScorer().score_batch(completions, targets)  # the fault-free results
    cfg = _cfg(chunk_size=256, min_chunk_size=64, chunk_timeout_s=60)
    with RewardPool.create(None, cfg, run_id="kill") as pool:
        victim = pool.worker_names()[0]
        pid = pool.worker_pids()[victim]
        ticket = pool.submit(completions, targets)
        assert _wait(lambda: pool.stats()["items_scored"] > 0, 30)
        os.kill(pid, signal.SIGKILL)
        results = pool.collect_results([ticket])
        assert results == expected
        assert pool.collect([ticket]).stats["reward_retries"] >= 1  # the dead worker's chunks ran again
        assert _wait(lambda: pool.worker_pids()[victim] not in (pid, None), 30)
        assert pool.stats()["worker_restarts"] == 1
        assert pool.score(completions[:500], targets[:500]) == expected[:500]


@pytest.mark.slow
def test_a_hanging_item_times_out_alone_and_the_pool_keeps_serving():
    reward = _user("spins_on_marker")
    cfg = _cfg(chunk_size=16, min_chunk_size=4, split_parts=4, chunk_timeout_s=1.0, max_retries=0)
    completions = [FEN] * 30 + ["HANG " + FEN] + [FEN[:-3]] * 33
    targets = [FEN] * len(completions)
    with RewardPool.create(reward, cfg, run_id="hang") as pool:
        ticket = pool.submit(completions, targets)
        bound = poison_item_bound_s(cfg, RESTART_ALLOWANCE_S, chunk_len=16)  # 3 runs x (1 s + 4 s)
        rewards = pool.collect([ticket], timeout_s=10 * bound)  # only a guard against a hang
        results = pool.collect_results([ticket])
        poison = results.pop(30)
        assert poison.status == TIMEOUT and "chunk_timeout_s=1s" in poison.reason
        assert rewards.usable[30] is False and rewards.usable.count(False) == 1
        others = completions[:30] + completions[31:]
        assert results == FenScorer(reward).score_batch(others, targets[1:])  # the rest scored normally
        # the poison item ran as often as the bound counts (16 items, then 4, then itself), no more
        assert rewards.stats["reward_timeouts"] == 1
        assert rewards.stats["reward_deadline_kills"] == max_runs_per_item(cfg, chunk_len=16) == 3
        ok = pool.score([FEN] * 200, [FEN] * 200, timeout_s=10 * (RESTART_ALLOWANCE_S + 1))  # a hang guard
        assert [r.status for r in ok] == ["ok"] * 200


def test_a_raising_reward_gives_error_and_a_high_error_rate_fails_the_collection():
    reward = _user("raises_on_marker")
    with RewardPool.create(reward, _cfg(error_rate_threshold=0.25), run_id="raise") as pool:
        completions = [FEN] * 39 + ["RAISE"]
        rewards = pool.collect([pool.submit(completions, [FEN] * 40)])
        assert rewards.statuses[-1] == ERROR and rewards.usable[-1] is False
        assert rewards.stats["reward_errors"] == 1 and rewards.statuses[:-1] == ["ok"] * 39
        ticket = pool.submit(["RAISE", FEN, "RAISE", FEN], [FEN] * 4)
        with pytest.raises(
            RewardErrorRateExceeded, match=r"2 of 4 rewards failed.*error_rate_threshold=0.25"
        ):
            pool.collect([ticket])
        with pytest.raises(RewardErrorRateExceeded, match="raised RuntimeError: marker seen"):
            pool.collect_results([ticket])
        assert pool.score([FEN], [FEN])[0].status == "ok"  # the pool itself is fine


@pytest.mark.slow
def test_an_item_that_kills_its_worker_gets_error_and_the_rest_score():
    reward = _user("kills_process_on_marker")
    cfg = _cfg(chunk_size=16, min_chunk_size=4, split_parts=4, max_retries=0, chunk_timeout_s=30)
    completions = [FEN] * 20 + ["CRASH"] + [FEN] * 11
    with RewardPool.create(reward, cfg, run_id="crash") as pool:
        ticket = pool.submit(completions, [FEN] * 32)
        rewards = pool.collect([ticket], timeout_s=120)
        assert rewards.statuses[20] == ERROR and rewards.statuses.count("ok") == 31
        reason = pool.collect_results([ticket])[20].reason
        assert "worker process died while scoring this item" in reason


def test_when_every_worker_is_gone_collect_says_so():
    reward = _user("kills_process_on_marker")
    cfg = _cfg(num_workers=1, max_restarts=0, chunk_timeout_s=30)
    with RewardPool.create(reward, cfg, run_id="dead") as pool:
        ticket = pool.submit(["CRASH"], [FEN])
        with pytest.raises(RewardPoolUnavailable, match="all 1 reward workers are dead"):
            pool.collect([ticket], timeout_s=60)
        with pytest.raises(RewardPoolUnavailable):
            pool.submit([FEN], [FEN])
