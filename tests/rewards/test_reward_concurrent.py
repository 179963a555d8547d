"""Rewards that wait or hold state, without Ray: async def rewards side by side with a per-item
deadline, blocking rewards on threads, class rewards with setup/__call__/close."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from rewards import ERROR, TIMEOUT, FenScorer, RewardConfig, Scorer, register_reward, unregister_reward
from rewards.concurrent import score_batch_concurrent
from rewards.config import UserRewardSpec
from tests.company import Company

FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"


async def _judge(completion, target):
    await asyncio.sleep(0.05)
    if completion.startswith("HANG"):
        await asyncio.Event().wait()
    if completion.startswith("BOOM"):
        raise RuntimeError("judge down")
    return 1.0 if completion == target else 0.25


_BLOCKED = Company(16)


def _blocking(completion, target):
    """Blocks until 16 calls are blocked at once (threads side by side), as a reward waiting on I/O."""
    if not _BLOCKED.wait():
        raise RuntimeError("16 calls never blocked at once")
    return 0.5


class _Counter:
    built = closed = 0

    def setup(self):
        type(self).built += 1

    def __call__(self, completion, target=None):  # arguments by name, as for a function reward
        return 0.75

    def close(self):
        type(self).closed += 1


@pytest.fixture(autouse=True)
def _registered():
    for name, fn in (("judge", _judge), ("blocking", _blocking), ("counter", _Counter)):
        register_reward(name, fn, replace=True)
    yield
    for name in ("judge", "blocking", "counter"):
        unregister_reward(name)


def _scorer(name: str, **kw) -> Scorer:
    return FenScorer(RewardConfig(user=[UserRewardSpec(fn=name, **kw)]))


def _run(scorer, completions, **kw):
    kw = {"concurrency": 64, "item_timeout_s": 1.0, **kw}
    return asyncio.run(score_batch_concurrent(scorer, completions, [FEN] * len(completions), None, **kw))


def test_async_items_run_side_by_side_and_equal_the_one_by_one_results():
    company = Company(8)  # an item answers once 8 have waited at once: only side by side gets there

    async def judge_in_company(completion, target):
        if not await company.wait_async():
            raise RuntimeError("8 items never waited at once")
        return 1.0 if completion == target else 0.25

    register_reward("judge_in_company", judge_in_company, replace=True)
    try:
        scorer = _scorer("judge_in_company")
        assert scorer.concurrent
        completions = [FEN, FEN[:-1], "garbage", "x" * 600] * 16  # too_long items never reach the reward
        results = _run(scorer, completions)  # one by one, the first item would time out alone
        assert company.most >= 8 and TIMEOUT not in {r.status for r in results}
        assert results == [scorer.score(c, FEN) for c in completions[:4]] * 16  # company met: no wait now
    finally:
        unregister_reward("judge_in_company")


def test_an_item_that_never_answers_times_out_alone_and_a_raising_one_errs():
    scorer = _scorer("judge")
    results = _run(scorer, [FEN, "HANG", "BOOM", FEN], item_timeout_s=0.5, timeout_reason="cut")
    assert [r.status for r in results] == ["ok", TIMEOUT, ERROR, "ok"]
    assert results[1].reason == "cut" and "judge down" in results[2].reason


def test_a_blocking_reward_that_asks_for_threads_runs_on_them():
    scorer = _scorer("blocking", threads=True)
    with ThreadPoolExecutor(16) as pool:
        results = _run(scorer, [FEN] * 32, concurrency=16, executor=pool)
    # each call blocked until 16 were blocked at once: one thread at a time, each would time out
    assert {r.status for r in results} == {"ok"} and _BLOCKED.most == 16
    assert not _scorer("blocking").concurrent  # without the flag it is a plain reward


def test_a_class_reward_is_built_and_set_up_once_then_closed():
    _Counter.built = _Counter.closed = 0
    scorer = _scorer("counter")
    scorer.setup()
    results = scorer.score_batch([FEN] * 5, [FEN] * 5)
    assert {r.components["counter"] for r in results} == {0.75} and _Counter.built == 1
    scorer.close()
    assert _Counter.closed == 1
    scorer.score(FEN, FEN)  # scoring again after close builds a new one
    assert _Counter.built == 2
