"""The worker class and what a reward pool's workers keep are plain objects: tested without Ray."""

from __future__ import annotations

import os

import pytest

from actors.pool.codec import decode
from actors.pool.scoring import ChunkScorer
from actors.pool.work import Failed
from actors.pool.worker import RewardWorker
from bench.pool_workload import realistic_batch
from rewards import ERROR, FenScorer, RewardConfig, UserRewardScorer
from rewards.config import UserRewardSpec

FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"


class Tally:
    """A host that keeps state between calls (as an environment's episodes do)."""

    def __init__(self):
        self.seen = 0
        self.set_up = False

    def setup(self):
        self.set_up = True

    def add(self, numbers, signs):
        self.seen += len(numbers)
        return [n * s for n, s in zip(numbers, signs, strict=True)]

    def one_short(self, numbers):
        return numbers[1:]

    def fails(self, numbers):
        raise KeyError("no such number")


def test_a_call_runs_the_function_on_the_host_over_a_slice_of_the_columns():
    host = Tally()
    worker = RewardWorker(host)
    assert host.set_up  # a worker sets its host up when it starts
    reply = worker.call(Tally.add, ([1, 2, 3, 4], [1, -1, 1, -1]), 1, 3)
    assert reply.results == [-2, 3] and len(reply) == 2
    assert worker.call(Tally.add, ([5], [2])).results == [10]
    assert host.seen == 3 and worker.items_done() == 3 and worker.ping() == os.getpid()


def test_a_function_that_raises_or_answers_for_other_items_fails_every_item_of_its_call():
    worker = RewardWorker(Tally())
    raised = worker.call(Tally.fails, ([1, 2],)).results
    assert raised == Failed(2, ERROR, "Tally.fails failed: KeyError: 'no such number'")
    short = worker.call(Tally.one_short, ([1, 2, 3],)).results
    assert (short.n, short.status) == (3, ERROR) and "returned list of length 2 for 3 items" in short.reason


def test_a_slice_outside_the_items_is_refused():
    with pytest.raises(ValueError, match=r"slice \[2, 5\) does not fit items of columns \[3, 3\]"):
        RewardWorker(Tally()).call(Tally.add, ([1, 2, 3], [1, 1, 1]), 2, 5)
    with pytest.raises(ValueError, match=r"does not fit items of columns \[2, 3\]"):
        RewardWorker(Tally()).call(Tally.add, ([1, 2, 3], [1, 1]))


def _scores(worker: RewardWorker, *items, lo: int = 0, hi: int | None = None):
    return worker.call(ChunkScorer.score, items, lo, hi).results


def test_scores_like_the_scorer_and_slices_the_payload():
    cfg = RewardConfig(user=[UserRewardSpec(fn="user_rewards:length_bonus")])
    completions, targets = realistic_batch(100, seed=3, distinct_targets=5)
    worker = RewardWorker(ChunkScorer(cfg.model_dump()))  # a plain mapping works as well as a config
    expected = FenScorer(cfg).score_batch(completions, targets)
    assert decode(_scores(worker, completions, targets)) == expected
    assert decode(_scores(worker, completions, targets, lo=10, hi=30)) == expected[10:30]
    # each block names the scorer's own components, whose means a step reports
    assert _scores(worker, completions, targets, hi=5).reported == (
        "validity", "similarity", "exact", "user_rewards:length_bonus"
    )  # fmt: skip
    assert worker.items_done() == 125


def test_a_call_is_timed_by_the_workers_clock():
    readings = iter([10.0, 10.25])  # the call's start and end
    worker = RewardWorker(ChunkScorer(FenScorer()), clock=lambda: next(readings))
    assert (
        worker.call(ChunkScorer.score, ([FEN] * 5, [FEN] * 5)).busy_s == 0.25
    )  # what the pool divides by 5 items
    assert worker.timings()["busy_s"] == 0.25


def test_a_failing_score_batch_turns_every_item_into_an_error():
    worker = RewardWorker(ChunkScorer(FenScorer()))
    # A str where the scorer wants a sequence of completions: score_batch raises TypeError.
    out = decode(_scores(worker, "abc", [FEN] * 3))
    assert [r.status for r in out] == [ERROR] * 3
    assert out[0].reason.startswith("score_batch failed: TypeError")


def test_a_payload_with_fields_hands_each_item_its_row():
    scorer = UserRewardScorer(RewardConfig(user=[UserRewardSpec(fn="user_rewards:sum_of_fields")]))
    rows = [{"a": i, "b": 1} for i in range(6)]
    completions = [str(i + 1) if i % 2 else "0" for i in range(6)]
    worker = RewardWorker(ChunkScorer(scorer))
    out = decode(_scores(worker, completions, [None] * 6, rows, lo=1, hi=5))
    assert [r.total for r in out] == [1.0, 0.0, 1.0, 0.0]
    assert out == scorer.score_batch(completions[1:5], [None] * 4, rows[1:5])


def test_what_a_trl_reward_logs_travels_with_its_chunk_once():
    scorer = UserRewardScorer(
        RewardConfig(user=[UserRewardSpec(fn="examples.rewards.trl_verl:reverse_reward")])
    )
    rows = [{"prompt": p} for p in ("ab", "ab", "cd", "cd")]
    worker = RewardWorker(ChunkScorer(scorer))
    first = _scores(worker, ["ba", "bx", "dc", "dc"], [None] * 4, rows, hi=2)
    second = _scores(worker, ["ba", "bx", "dc", "dc"], [None] * 4, rows, lo=2, hi=4)
    assert first.logged == {"reversed_exactly": (0.5, 1.0)}  # one call: 1 of 2 reversed exactly
    assert second.logged == {"reversed_exactly": (1.0, 1.0)}  # the next chunk's alone
