"""The worker class is a plain object: tested without Ray."""

from __future__ import annotations

import os

import pytest

from actors.pool.codec import decode
from actors.pool.worker import RewardWorker
from bench.pool_workload import realistic_batch
from rewards import ERROR, RewardConfig, Scorer, UserRewardScorer
from rewards.config import UserRewardSpec

FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"


def test_scores_like_the_scorer_and_slices_the_payload():
    cfg = RewardConfig(user=[UserRewardSpec(fn="user_rewards:length_bonus")])
    completions, targets = realistic_batch(100, seed=3, distinct_targets=5)
    worker = RewardWorker(cfg.model_dump())  # a plain mapping works as well as a config
    expected = Scorer(cfg).score_batch(completions, targets)
    assert decode(worker.score_chunk((completions, targets))) == expected
    assert decode(worker.score_chunk((completions, targets), 10, 30)) == expected[10:30]
    # each block names the scorer's own components, whose means a step reports
    assert worker.score_chunk((completions, targets), 0, 5).reported == (
        "validity", "similarity", "exact", "user_rewards:length_bonus"
    )  # fmt: skip
    assert worker.items_scored() == 125 and worker.ping() == os.getpid()


def test_a_call_is_timed_by_the_workers_clock():
    readings = iter([10.0, 10.25])  # the call's start and end
    worker = RewardWorker(Scorer(), clock=lambda: next(readings))
    assert worker.score_chunk(([FEN] * 5, [FEN] * 5)).busy_s == 0.25  # what the pool divides by 5 items
    assert worker.timings()["busy_s"] == 0.25


def test_a_slice_outside_the_payload_is_refused():
    with pytest.raises(ValueError, match=r"slice \[2, 5\) does not fit a payload of 3 completions"):
        RewardWorker().score_chunk((["a", "b", "c"], [FEN] * 3), 2, 5)


def test_a_failing_score_batch_turns_every_item_into_an_error():
    worker = RewardWorker(Scorer())
    # A str where the scorer wants a sequence of completions: score_batch raises TypeError.
    out = decode(worker.score_chunk(("abc", [FEN] * 3)))
    assert [r.status for r in out] == [ERROR] * 3
    assert out[0].reason.startswith("score_batch failed: TypeError")


def test_a_payload_with_fields_hands_each_item_its_row():
    scorer = UserRewardScorer(RewardConfig(user=[UserRewardSpec(fn="user_rewards:sum_of_fields")]))
    rows = [{"a": i, "b": 1} for i in range(6)]
    completions = [str(i + 1) if i % 2 else "0" for i in range(6)]
    worker = RewardWorker(scorer)
    out = decode(worker.score_chunk((completions, [None] * 6, rows), 1, 5))
    assert [r.total for r in out] == [1.0, 0.0, 1.0, 0.0]
    assert out == scorer.score_batch(completions[1:5], [None] * 4, rows[1:5])


def test_what_a_trl_reward_logs_travels_with_its_chunk_once():
    scorer = UserRewardScorer(
        RewardConfig(user=[UserRewardSpec(fn="examples.rewards.trl_verl:reverse_reward")])
    )
    rows = [{"prompt": p} for p in ("ab", "ab", "cd", "cd")]
    worker = RewardWorker(scorer)
    first = worker.score_chunk((["ba", "bx", "dc", "dc"], [None] * 4, rows), 0, 2)
    second = worker.score_chunk((["ba", "bx", "dc", "dc"], [None] * 4, rows), 2, 4)
    assert first.logged == {"reversed_exactly": (0.5, 1.0)}  # one call: 1 of 2 reversed exactly
    assert second.logged == {"reversed_exactly": (1.0, 1.0)}  # the next chunk's alone
