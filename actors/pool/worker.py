"""One reward worker: a plain class around the pure scorer, made a Ray actor only at assembly time.

`RewardWorker` knows nothing of Ray; `RewardPool` applies `ray.remote(...).options(...)` to it with
resources and names from `PoolConfig`. A call scores a slice of a chunk payload (so a retried or
split chunk reuses the payload already in the object store) and returns compact columns, with the
process's resident memory after the call and what the call's rewards printed (captured and capped,
see worker_watch.py), which the pool reads.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from actors.pool.codec import EncodedResults, encode, failed_block, reported_components
from actors.pool.waiting import WaitingRunner
from actors.pool.worker_watch import capture_output, rss_mb
from rewards import ERROR, RewardConfig, Scorer, build_scorer
from rewards.reward_log import take_logged_metrics

# (completions, targets) of one chunk, or (completions, targets, fields) when its items carry data
# fields, as the pool sends it.
Payload = tuple[Sequence[Any], ...]


def is_scorer(obj: Any) -> bool:
    """A built scorer: the reward `Scorer`, or another object scoring items the same way (the
    episode calls of `rewards.env.remote`); anything else is a reward config to build one from."""
    return isinstance(obj, Scorer) or callable(getattr(obj, "score_batch", None))


class RewardWorker:
    """Scores chunks with one `Scorer` (built-in FEN/Levenshtein reward plus the user rewards)."""

    def __init__(
        self,
        scorer: Scorer | RewardConfig | Mapping[str, Any] | None = None,
        concurrency: int = 1,
        item_timeout_s: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        """`clock` (seconds) times each call: the busy time the pool turns into a cost per item."""
        # A Scorer built by the pool carries its resolved user rewards (registered ones included).
        self._scorer = scorer if is_scorer(scorer) else build_scorer(scorer)
        # Rewards that wait (async def, or asking for threads) score `concurrency` items at once,
        # each cut at `item_timeout_s`; the others score one after another, as they always have.
        self._runner = WaitingRunner(concurrency, item_timeout_s or 5.0) if self._scorer.concurrent else None
        # State the reward keeps per process (an engine, a connection) starts with the worker: a
        # restarted worker gets its own, and one that cannot start fails the worker's start, visibly.
        setup = getattr(self._scorer, "setup", None)
        if callable(setup):
            setup()
        self._clock = clock
        self._items_scored = 0
        self._busy_s = 0.0  # wall time inside score_chunk
        self._cpu_s = 0.0  # CPU time this process got meanwhile (less than busy when starved)

    def score_chunk(self, payload: Payload, lo: int = 0, hi: int | None = None) -> EncodedResults:
        """Results of items [lo, hi) of the payload, as columns. Never raises for bad items."""
        completions, targets, *rest = payload
        fields = rest[0] if rest else None
        hi = len(completions) if hi is None else hi
        if not (0 <= lo <= hi <= len(completions) == len(targets)):
            raise ValueError(
                f"slice [{lo}, {hi}) does not fit a payload of {len(completions)} completions "
                f"and {len(targets)} targets"
            )
        began, began_cpu = self._clock(), time.thread_time()
        # What the rewards print is kept (capped) and travels with the results, never to the log.
        with capture_output() as output:
            try:
                rows = None if fields is None else fields[lo:hi]
                if self._runner is not None:
                    results = self._runner.score(self._scorer, completions[lo:hi], targets[lo:hi], rows)
                else:
                    results = self._scorer.score_batch(completions[lo:hi], targets[lo:hi], rows)
                encoded = encode(results, reported_components(self._scorer))
            except Exception as exc:  # the scorer's own guard failed: every item errs, visibly
                encoded = failed_block(hi - lo, ERROR, f"score_batch failed: {type(exc).__name__}: {exc}")
        busy_s = self._clock() - began
        self._busy_s += busy_s
        self._cpu_s += time.thread_time() - began_cpu
        self._items_scored += hi - lo
        return dataclasses.replace(
            encoded,
            worker_rss_mb=rss_mb(),
            busy_s=busy_s,
            output=output.text(),
            output_bytes=output.written,
            logged=take_logged_metrics(self._scorer),
        )

    def ping(self) -> int:
        """The worker's process id: answers once the worker is up (a new id after a restart)."""
        return os.getpid()

    def items_scored(self) -> int:
        """Items scored by this process since it started."""
        return self._items_scored

    def rss_mb(self) -> float | None:
        """Resident memory of this process now, in MiB."""
        return rss_mb()

    def timings(self) -> dict[str, float]:
        """Since this process started: items, wall seconds in score_chunk, CPU seconds it got."""
        return {"items": float(self._items_scored), "busy_s": self._busy_s, "cpu_s": self._cpu_s}
