"""Scoring on the pool's workers: what a reward pool's worker keeps, and the function its calls run.

A reward pool's workers are built with a `ChunkScorer` (the task's scorer, and the threads and event
loop of rewards that wait); `RewardPool.submit` calls `ChunkScorer.score` over the items
(completions, targets, and each item's data fields where it has them), which returns the chunk's
results as compact columns (codec.py) with what the rewards logged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from actors.pool.codec import EncodedResults, encode, failed_block, reported_components
from actors.pool.waiting import WaitingRunner
from rewards import ERROR, RewardConfig, Scorer, build_scorer
from rewards.reward_log import take_logged_metrics

_DEFAULT_ITEM_TIMEOUT_S = 5.0


def is_scorer(obj: Any) -> bool:
    """A built scorer: the reward `Scorer`, or another object scoring items the same way
    (`score_batch`); anything else is a reward config to build one from."""
    return isinstance(obj, Scorer) or callable(getattr(obj, "score_batch", None))


class ChunkScorer:
    """Scores chunks with one scorer (the task's reward, user rewards included) in a worker's process."""

    def __init__(
        self,
        scorer: Scorer | RewardConfig | Mapping[str, Any] | None = None,
        concurrency: int = 1,
        item_timeout_s: float | None = None,
    ):
        # A Scorer built by the pool carries its resolved user rewards (registered ones included).
        self.scorer = scorer if is_scorer(scorer) else build_scorer(scorer)
        self.concurrency = concurrency
        self.item_timeout_s = item_timeout_s or _DEFAULT_ITEM_TIMEOUT_S
        self._runner: WaitingRunner | None = None

    def __getstate__(self) -> dict[str, Any]:  # the runner's threads stay in the process that made them
        return {**self.__dict__, "_runner": None}

    def setup(self) -> None:
        """State the reward keeps per process (an engine, a connection), made when the worker starts."""
        setup = getattr(self.scorer, "setup", None)
        if callable(setup):
            setup()
        if self.scorer.concurrent:
            self._waiting()

    def score(
        self, completions: Sequence[Any], targets: Sequence[Any], fields: Sequence[Any] | None = None
    ) -> EncodedResults:
        """The items' results as columns, with what the rewards logged meanwhile. Never raises for
        bad items; a scorer that raises makes every item `error`, with its reason."""
        try:
            if self.scorer.concurrent:
                # Rewards that wait (async def, or asking for threads) score `concurrency` items at
                # once, each cut at `item_timeout_s`; the others score one after another.
                results = self._waiting().score(self.scorer, completions, targets, fields)
            else:
                results = self.scorer.score_batch(completions, targets, fields)
            encoded = encode(results, reported_components(self.scorer))
        except Exception as exc:  # the scorer's own guard failed: every item errs, visibly
            encoded = failed_block(
                len(completions), ERROR, f"score_batch failed: {type(exc).__name__}: {exc}"
            )
        return dataclasses.replace(encoded, logged=take_logged_metrics(self.scorer))

    def _waiting(self) -> WaitingRunner:
        if self._runner is None:
            self._runner = WaitingRunner(self.concurrency, self.item_timeout_s)
        return self._runner
