"""The reward pool's metrics, exported with `ray.util.metrics` (Prometheus, the dashboard's metrics).

Every series carries a `run_id` tag; per-worker series also carry `worker` (the actor name).
Prometheus sees them with Ray's `ray_` prefix, e.g. `ray_reward_pool_items_total`; the names and
descriptions live in the one catalogue, `actors.metric_names.POOL_SERIES`.
The same numbers reach the trainer's metrics.jsonl through `Rewards.stats`.
"""

from __future__ import annotations

from collections import deque

from ray.util.metrics import Counter, Gauge, Histogram

from actors.metric_names import POOL_SERIES

# Seconds blocked in collect: from "scoring kept up" (ms) to "the step waited on rewards" (s).
WAIT_BOUNDARIES_S = [0.001, 0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0]


def _metric(series: str) -> Counter | Gauge | Histogram:
    """The Ray metric of one catalogue entry (`actors.metric_names.POOL_SERIES`)."""
    spec = POOL_SERIES[series]
    tags = ("run_id", "worker") if spec.per_worker else ("run_id",)
    if spec.kind == "counter":
        return Counter(series, spec.description, tag_keys=tags)
    if spec.kind == "gauge":
        return Gauge(series, spec.description, tag_keys=tags)
    return Histogram(series, spec.description, WAIT_BOUNDARIES_S, tag_keys=tags)


class PoolMetrics:
    """Counters, gauges and a histogram for one pool; created with the pool, never at import."""

    def __init__(self, run_id: str):
        self._run = {"run_id": run_id}
        self._items = _metric("reward_pool_items")
        self._errors = _metric("reward_pool_errors")
        self._timeouts = _metric("reward_pool_timeouts")
        self._restarts = _metric("reward_pool_worker_restarts")
        self._recycled = _metric("reward_pool_worker_recycled")
        self._rss = _metric("reward_pool_worker_rss_mb")
        self._retries = _metric("reward_pool_retries")
        self._queue = _metric("reward_pool_queue_depth")
        self._rate = _metric("reward_pool_items_per_s")
        self._wait = _metric("reward_pool_wait_s")

    def _tags(self, worker: str) -> dict[str, str]:
        return {**self._run, "worker": worker}

    def scored(self, worker: str, items: int, errors: int) -> None:
        if items:
            self._items.inc(items, tags=self._tags(worker))
        if errors:
            self._errors.inc(errors, tags=self._tags(worker))

    def timed_out(self, worker: str) -> None:
        self._timeouts.inc(1, tags=self._tags(worker))

    def restarted(self, worker: str) -> None:
        self._restarts.inc(1, tags=self._tags(worker))

    def recycled(self, worker: str) -> None:
        self._recycled.inc(1, tags=self._tags(worker))

    def worker_rss(self, worker: str, mb: float) -> None:
        self._rss.set(mb, tags=self._tags(worker))

    def retried(self, chunks: int) -> None:
        if chunks:
            self._retries.inc(chunks, tags=self._run)

    def queue_depth(self, items: int) -> None:
        self._queue.set(items, tags=self._run)

    def items_per_s(self, rate: float) -> None:
        self._rate.set(rate, tags=self._run)

    def waited(self, seconds: float) -> None:
        self._wait.observe(seconds, tags=self._run)


class RateWindow:
    """Items per second over the last `window_s` seconds."""

    def __init__(self, window_s: float = 10.0):
        self._window_s = window_s
        self._events: deque[tuple[float, int]] = deque()
        self._total = 0

    def add(self, now: float, items: int) -> None:
        self._events.append((now, items))
        self._total += items

    def rate(self, now: float) -> float:
        while self._events and self._events[0][0] < now - self._window_s:
            self._total -= self._events.popleft()[1]
        return self._total / self._window_s
