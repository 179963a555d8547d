"""Where a step's rewards are scored: in the trainer's process or on the pool, decided by measurement.

    rewards = PlacedRewards(pool, scorer, "auto")      # a RewardSource, like the pool itself
    trainer.grpo_step(pairs, rewards)

`auto` scores user rewards (`reward.user`) on the pool, always: their code may leak memory, print
without end or crash its process, and in process that process is the trainer's (only `inline`
runs them there). With the task's own built-in reward alone, `auto` scores its first four steps on
the pool and in process in turn, timing what each costs the step's critical path (the time spent
in `submit` and `collect`) per item, and keeps the side whose cheaper step was cheaper.
While it runs it keeps timing the chosen side, and measures both sides again when the other may
have become the cheaper: the chosen side's cost fell below 1/`RECHECK_RATIO` of its cost at the
decision (the other may have fallen further), or rose past `RECHECK_RATIO` times it and past what
the other side cost then (a rise alone would cross 2x on noise where one side is far cheaper).
A checkpoint keeps the decision (`state_dict`), and a resumed run continues it without probing.
Every decision is logged with its figures, and each step's stats carry `placement_inline` (1 or 0)
and the two per-item costs last measured, which the trainer writes to `metrics.jsonl` as
`scorer_placement_*`.

In process, a batch is scored on a thread with the pool's call deadline (`chunk_timeout_s`): a
reward that overruns it is left behind and the batch goes to the pool, which can kill a worker;
the placement is then pinned to the pool for the rest of the run. Statuses and the error-rate
guard are the pool's own (`failure_policy.check_error_rate`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from actors.pool.codec import component_sums, encode, logged_extras, reported_components
from actors.pool.daemon_threads import DaemonThreads
from actors.pool.failure_policy import check_error_rate, failure_reasons
from actors.pool.reward_pool import RewardPool
from actors.pool.work import Ticket
from rewards import ERROR, TIMEOUT, USABLE_STATUSES, Scorer
from rewards.reward_log import take_logged_metrics
from trainer.grpo.reward_source import Rewards

logger = logging.getLogger(__name__)

# auto's probe steps, in this order; each side's cost is its cheaper step (the first use of a side
# pays one-off costs: a thread starting, caches filling)
PROBE = ("pool", "inline", "pool", "inline")
RECHECK_RATIO = 2.0
INLINE_THREAD = "inline-reward"


class PlacedRewards:
    """A RewardSource scoring each step in process or on `pool` (mode: auto | inline | pool)."""

    def __init__(self, pool: RewardPool, scorer: Scorer, mode: str, log=logger.info):
        if mode not in ("auto", "inline", "pool"):
            raise ValueError(
                f"pool.placement: {mode!r} is not allowed; expected one of 'auto', 'inline', 'pool'"
            )
        self.pool, self.scorer, self.mode, self._log = pool, scorer, mode, log
        self._executor = DaemonThreads(1, INLINE_THREAD)
        self._probe: list[str] = list(PROBE) if mode == "auto" else []
        self.where = mode if mode != "auto" else PROBE[0]
        self.cost_ms: dict[str, float | None] = {"inline": None, "pool": None}  # per item, last measured
        self._chosen_ms: float | None = None
        self._other_ms: float | None = None  # the side not chosen, at the decision
        self._probed: dict[str, list[float]] = {"inline": [], "pool": []}
        self._pinned = False
        self._spent = 0.0  # seconds of this step's critical path in submit/collect
        self._inline_reasons: list[str] = []  # reasons of failed items scored in process this step
        self.failure_reasons: list[str] = []  # up to three reasons of the last collect's failed items
        self.decisions: list[dict[str, Any]] = []
        user = [u.name for u in getattr(scorer, "user_rewards", ())]
        if mode == "auto" and user:
            self._pin(
                f"user rewards ({', '.join(user)}) run on the pool, out of the trainer's process "
                "(pool.placement: inline scores them in process)"
            )

    def submit(self, completions: list[str], targets: list[Any], *, fields: list[Any] | None = None) -> Any:
        began = time.perf_counter()
        try:
            if self.where == "inline":
                return self._inline(completions, targets, fields)
            return self.pool.submit(completions, targets, fields=fields)
        finally:
            self._spent += time.perf_counter() - began

    def _inline(self, completions: list[str], targets: list[Any], fields: list[Any] | None) -> Any:
        job = self._executor.submit(self.scorer.score_batch, completions, targets, fields)
        try:
            results = job.result(timeout=self.pool.cfg.chunk_timeout_s)
        except FutureTimeout:
            self._executor.shutdown()  # the stuck call is left behind on a daemon thread: no exit waits for it
            self._executor = DaemonThreads(1, INLINE_THREAD)
            self._pin(f"scoring {len(completions)} items in process passed pool.chunk_timeout_s="
                      f"{self.pool.cfg.chunk_timeout_s:g}s")  # fmt: skip
            return self.pool.submit(completions, targets, fields=fields)
        statuses = [r.status for r in results]
        stats = {
            "reward_items": float(len(results)),
            "reward_errors": float(statuses.count(ERROR)),
            "reward_timeouts": float(statuses.count(TIMEOUT)),
        }
        block = encode(results, reported_components(self.scorer))  # the columns the pool's results have
        if stats["reward_errors"] or stats["reward_timeouts"]:
            self._inline_reasons += failure_reasons([block])
        if results and self.pool.enforce_error_rate:  # the pool's guard, inline as on the pool
            check_error_rate([block], stats, self.pool.cfg.error_rate_threshold)
        usable = [s in USABLE_STATUSES for s in statuses]
        sums, logged = component_sums([block]), take_logged_metrics(self.scorer)
        return Rewards(
            [r.total for r in results], usable, statuses, stats, sums, logged, logged_extras(results)
        )

    def collect(self, tickets: Sequence[Any], timeout_s: float | None = None) -> Rewards:
        """Every ticket's rewards in ticket order, from the pool or scored in process at submit."""
        began = time.perf_counter()
        on_pool = [t for t in tickets if isinstance(t, Ticket)]
        pooled = self.pool.collect(on_pool, timeout_s) if on_pool else None
        reasons = self._inline_reasons + (self.pool.failure_reasons if on_pool else [])
        self.failure_reasons, self._inline_reasons = list(dict.fromkeys(reasons))[:3], []
        parts, offset = [], 0
        for t in tickets:
            if isinstance(t, Ticket):
                # the pool's additive figures go with its first slice (they add up)
                parts.append(pooled.sliced(offset, offset + t.size, sums=offset == 0))
                offset += t.size
            else:
                parts.append(t)
        out = Rewards.concat(parts)
        self._spent += time.perf_counter() - began
        where = self.where
        self._observe(len(out.values))
        out.stats.update(self._placement_stats(where))
        return out

    def _observe(self, items: int) -> None:
        """Book this step's cost per item on its side; decide when a probe ends or the cost moved."""
        spent, self._spent = self._spent, 0.0
        if not items:
            return
        ms = spent * 1e3 / items
        self.cost_ms[self.where] = ms
        if self._pinned or self.mode != "auto":
            return
        if self._probe:
            self._probed[self.where].append(ms)
            self._probe.pop(0)
            if self._probe:
                self.where = self._probe[0]
            else:
                self._decide("measured both")
        elif self._chosen_ms and self._recheck_due(ms):
            self._log(
                f"[placement] {self.where} now costs {ms:.3f} ms/item (was {self._chosen_ms:.3f}): measuring again"
            )
            self._probe = list(PROBE)
            self.where = self._probe[0]

    def _recheck_due(self, ms: float) -> bool:
        """Whether the chosen side's cost `ms` per item moved so that the other side may be cheaper."""
        chosen, other = self._chosen_ms, self._other_ms or 0.0
        return ms < chosen / RECHECK_RATIO or ms > max(chosen * RECHECK_RATIO, other)

    def _decide(self, why: str) -> None:
        inline, pool = (min(self._probed[side], default=None) for side in ("inline", "pool"))
        self._probed = {"inline": [], "pool": []}
        if inline is None or pool is None:  # probe steps without items: measure again
            self._probe = list(PROBE)
            self.where = self._probe[0]
            return
        self.where = "inline" if inline <= pool else "pool"
        self._chosen_ms, self._other_ms = (inline, pool) if self.where == "inline" else (pool, inline)
        record = {"where": self.where, "inline_ms_per_item": inline, "pool_ms_per_item": pool, "why": why}
        self.decisions.append(record)
        self._log(f"[placement] rewards scored {'in process' if self.where == 'inline' else 'on the pool'}: "
                  f"{inline:.3f} ms/item in process, {pool:.3f} ms/item on the pool ({why})")  # fmt: skip

    def _pin(self, why: str) -> None:
        self._pinned, self.where, self._probe = True, "pool", []
        self.decisions.append(
            {"where": "pool", "inline_ms_per_item": None, "pool_ms_per_item": None, "why": why}
        )
        self._log(f"[placement] rewards scored on the pool from now on: {why}")

    def _placement_stats(self, where: str) -> dict[str, float]:
        stats = {"placement_inline": 1.0 if where == "inline" else 0.0}
        for side, ms in self.cost_ms.items():
            if ms is not None:
                stats[f"placement_{side}_ms_per_item"] = ms
        return stats

    def state_dict(self) -> dict[str, Any]:
        """The decision as it stands, for a checkpoint: a resumed run continues it instead of
        probing again."""
        return {
            "where": self.where,
            "chosen_ms": self._chosen_ms,
            "other_ms": self._other_ms,
            "pinned": self._pinned,
            "decided": not self._probe,
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Continue a decision of `state_dict` (auto only: a fixed placement is the config's)."""
        if self.mode != "auto" or not state or not state.get("decided"):
            return
        self.where, self._probe = state["where"], []
        self._chosen_ms, self._other_ms = state.get("chosen_ms"), state.get("other_ms")
        self._pinned = self._pinned or bool(state.get("pinned"))
        if self._pinned:
            self.where = "pool"

    def shutdown(self) -> None:
        self._executor.shutdown()
