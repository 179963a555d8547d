"""One pool worker: a plain class that runs functions over chunks of items, made a Ray actor only at
assembly time.

`RewardWorker` knows nothing of Ray; the pool applies `ray.remote(...).options(...)` to it with
resources and names from `PoolConfig`. It is built with what its calls work on, kept in its
process for as long as it lives (`host`: the scorer of a reward task, the episodes of an
environment's), and `call(fn, items, lo, hi)` runs `fn(host, *columns)` over a slice of a chunk's
columns (so a retried or split chunk reuses the payload already in the object store). A call
returns a `Reply`: `fn`'s results, one per item, with the process's resident memory after the call,
its busy time, and what the call printed (captured and capped, see worker_watch.py), which the pool
reads.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from actors.pool.work import Failed
from actors.pool.worker_watch import capture_output, rss_mb
from rewards.result import ERROR


@dataclass(frozen=True)
class Reply:
    """What a worker sends back for one call."""

    results: Any  # what the function returned, one result per item (or `Failed` when it raised)
    worker_rss_mb: float | None = None  # the process's resident memory after the call
    busy_s: float | None = None  # the call's wall time inside the worker
    output: str = ""  # the first bytes the call printed (stdout and stderr)
    output_bytes: int = 0  # every byte it printed, kept or not

    def __len__(self) -> int:
        return len(self.results)


def run_slice(
    fn: Callable[..., Any], host: Any, items: Sequence[Sequence[Any]], lo: int, hi: int | None
) -> Any:
    """`fn(host, *columns)` over items [lo, hi) of `items` (its columns, one entry per item each);
    `Failed` (status error, with the reason) when `fn` raises or answers for another number of
    items. ValueError when the slice does not fit the columns."""
    sizes = {len(column) for column in items}
    n = sizes.pop() if len(sizes) == 1 else None
    hi = n if hi is None else hi
    if n is None or not (0 <= lo <= hi <= n):
        raise ValueError(f"slice [{lo}, {hi}) does not fit items of columns {sorted(len(c) for c in items)}")
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        results = fn(host, *(column[lo:hi] for column in items))
    except Exception as exc:  # the function's own guard failed: every item errs, visibly
        return Failed(hi - lo, ERROR, f"{name} failed: {type(exc).__name__}: {exc}")
    if not hasattr(results, "__len__") or len(results) != hi - lo:
        got = f"{type(results).__name__} of length {len(results) if hasattr(results, '__len__') else '?'}"
        return Failed(hi - lo, ERROR, f"{name} returned {got} for {hi - lo} items")
    return results


class RewardWorker:
    """A worker of the pool: runs calls on the `host` it keeps in its process."""

    def __init__(self, host: Any, clock: Callable[[], float] = time.perf_counter):
        """`clock` (seconds) times each call: the busy time the pool turns into a cost per item."""
        self._host = host
        # State the host keeps per process (a reward's engine, an environment's child process)
        # starts with the worker: a restarted worker gets its own, and one that cannot start fails
        # the worker's start, visibly.
        setup = getattr(host, "setup", None)
        if callable(setup):
            setup()
        self._clock = clock
        self._items_done = 0
        self._busy_s = 0.0  # wall time inside call
        self._cpu_s = 0.0  # CPU time this process got meanwhile (less than busy when starved)

    def call(
        self, fn: Callable[..., Any], items: Sequence[Sequence[Any]], lo: int = 0, hi: int | None = None
    ) -> Reply:
        """`fn(host, *columns)` over items [lo, hi) of `items` (a tuple of columns), with what the
        process reports beside it. Never raises for what `fn` does (see `run_slice`)."""
        began, began_cpu = self._clock(), time.thread_time()
        # What the call prints is kept (capped) and travels with the results, never to the log.
        with capture_output() as output:
            results = run_slice(fn, self._host, items, lo, hi)
        busy_s = self._clock() - began
        self._busy_s += busy_s
        self._cpu_s += time.thread_time() - began_cpu
        self._items_done += len(results)
        return Reply(results, rss_mb(), busy_s, output.text(), output.written)

    def ping(self) -> int:
        """The worker's process id: answers once the worker is up (a new id after a restart)."""
        return os.getpid()

    def items_done(self) -> int:
        """Items this process has run calls over since it started."""
        return self._items_done

    def rss_mb(self) -> float | None:
        """Resident memory of this process now, in MiB."""
        return rss_mb()

    def timings(self) -> dict[str, float]:
        """Since this process started: items, wall seconds in calls, CPU seconds it got."""
        return {"items": float(self._items_done), "busy_s": self._busy_s, "cpu_s": self._cpu_s}
