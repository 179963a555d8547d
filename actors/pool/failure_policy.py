"""What a failed reward does to a run, decided in one place from the counts of one batch.

Every item a reward scores ends with a status; the policy reads them as:

    status                                   counts as   its GRPO group
    ok, invalid, unparsable, too_long        scored      kept
    error (raised; NaN/inf or not a number)  failed      dropped
    timeout (passed its deadline)            failed      dropped
    skipped (the reward returned None)       skipped     dropped, never a failure

A batch fails the run when its failed items are more than `pool.error_rate_threshold` of its
items (`error_rate_problem`): the same rule, on the same counts, in `python -m service.check_reward`
(its sample), the run's preflight (its sample) and each GRPO step (the step's items over every
rank). Below the threshold a failed item only drops its group. Over a whole run, dropping more
than `pool.max_dropped_share` of the GRPO groups, or waiting for rewards for more than
`pool.max_reward_wait_share` of the GRPO step time, leaves the run `succeeded` with warnings
(`run_warnings`), each with the advice that fits.

Pure (no Ray, no torch): the pool, the preflight, the run loop and the recorder import it;
`check_error_rate` is the rule applied to a batch of encoded results (the pool's and an inline
placement's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actors.pool.codec import EncodedResults
from actors.pool.errors import RewardErrorRateExceeded
from rewards.result import ERROR, SKIPPED, TIMEOUT, USABLE_STATUSES


@dataclass(frozen=True)
class BatchCounts:
    """How the items of one batch ended (a NaN or non-finite reward is an `error`)."""

    items: int
    errors: int = 0
    timeouts: int = 0
    skipped: int = 0

    @classmethod
    def of_statuses(cls, statuses: Iterable[str]) -> BatchCounts:
        statuses = list(statuses)
        return cls(
            items=len(statuses),
            errors=statuses.count(ERROR),
            timeouts=statuses.count(TIMEOUT),
            skipped=statuses.count(SKIPPED),
        )

    @classmethod
    def of_stats(cls, stats: Mapping[str, Any], prefix: str = "") -> BatchCounts:
        """From the pool's additive stats (`reward_items`, ...); `prefix` as a step record names them."""

        def get(key: str) -> int:
            value = stats.get(prefix + key)
            return int(value) if isinstance(value, int | float) else 0

        return cls(get("reward_items"), get("reward_errors"), get("reward_timeouts"))

    @property
    def failed(self) -> int:
        return self.errors + self.timeouts

    @property
    def rate(self) -> float:
        """Failed share of the items (0 without items)."""
        return self.failed / self.items if self.items else 0.0


def error_rate_problem(counts: BatchCounts, threshold: float) -> str | None:
    """One line when the batch fails the run (failed share > threshold); None when it goes on."""
    if not counts.items or counts.rate <= threshold:
        return None
    return (
        f"{counts.failed} of {counts.items} rewards failed ({counts.errors} error, {counts.timeouts} timeout)"
        f" = {counts.rate:.1%} > pool.error_rate_threshold={threshold:g}"
    )


def dropped_groups(statuses: Sequence[str], group_size: int) -> list[int]:
    """Indices of the groups (items laid out group after group) that leave the update: those with
    an item that is not scored (error, timeout, skipped)."""
    if group_size < 1 or len(statuses) % group_size:
        raise ValueError(f"{len(statuses)} statuses do not form groups of {group_size}")
    return [
        g
        for g in range(len(statuses) // group_size)
        if any(s not in USABLE_STATUSES for s in statuses[g * group_size : (g + 1) * group_size])
    ]


def expected_dropped_share(counts: BatchCounts, group_size: int) -> float:
    """Share of groups of `group_size` a step would drop when items fail or skip at this batch's rate."""
    if not counts.items:
        return 0.0
    unscored = (counts.failed + counts.skipped) / counts.items
    return 1.0 - (1.0 - unscored) ** group_size


@dataclass(frozen=True)
class RunTotals:
    """A run's GRPO steps added up (from metrics.jsonl)."""

    groups: int = 0
    dropped_groups: int = 0  # groups with a failed or skipped reward
    items: int = 0
    errors: int = 0
    timeouts: int = 0
    reward_wait_s: float = 0.0
    step_time_s: float = 0.0

    @classmethod
    def of_records(cls, rows: Iterable[Mapping[str, Any]]) -> RunTotals:
        sums: dict[str, float] = {}
        keys = {
            "groups": "groups",
            "dropped_groups": "unusable_groups",
            "items": "scorer_reward_items",
            "errors": "scorer_reward_errors",
            "timeouts": "scorer_reward_timeouts",
            "reward_wait_s": "reward_wait_s",
            "step_time_s": "step_time_s",
        }
        for row in rows:
            if row.get("phase") != "grpo":
                continue
            for name, key in keys.items():
                value = row.get(key)
                if isinstance(value, int | float):
                    sums[name] = sums.get(name, 0.0) + float(value)
        counts = {n: int(sums.get(n, 0)) for n in ("groups", "dropped_groups", "items", "errors", "timeouts")}
        return cls(
            **counts, reward_wait_s=sums.get("reward_wait_s", 0.0), step_time_s=sums.get("step_time_s", 0.0)
        )


WAITING_ADVICE = (
    "a reward that waits (I/O, a subprocess, a remote call) scores many items at once as `async def` "
    "or with `threads: true` (reward.user), and pool.item_timeout_s cuts the slow ones short"
)
TIMEOUT_ADVICE = (
    "raise pool.item_timeout_s (async/threaded rewards) or pool.chunk_timeout_s if those items are "
    "only slow, make a waiting reward `async def` or `threads: true`"
)
ERROR_ADVICE = "`python -m service.check_reward` shows the rewards' errors on the run's data"
PLACEMENT_ADVICE = (
    "pool.placement: pool scores while the next micro-batch samples; more pool.num_workers share a step"
)


def run_warnings(totals: RunTotals, *, max_dropped_share: float, max_reward_wait_share: float) -> list[str]:
    """What a finished run says beside `succeeded`: too many groups dropped, or a step spent mostly
    waiting for rewards; each warning names its key, the measured share and the advice that fits."""
    warnings = []
    if totals.groups and totals.dropped_groups / totals.groups > max_dropped_share:
        share = totals.dropped_groups / totals.groups
        why = []
        if totals.timeouts:
            why.append(f"{totals.timeouts} items timed out: {TIMEOUT_ADVICE}")
        if totals.errors:
            why.append(f"{totals.errors} items failed: {ERROR_ADVICE}")
        advice = "; ".join(why) or "a reward skipped items (returned None)"
        warnings.append(
            f"rewards dropped {totals.dropped_groups} of {totals.groups} GRPO groups = {share:.0%} "
            f"> pool.max_dropped_share={max_dropped_share:g}: {advice}"
        )
    if totals.step_time_s > 0 and totals.reward_wait_s / totals.step_time_s > max_reward_wait_share:
        share = totals.reward_wait_s / totals.step_time_s
        warnings.append(
            f"waiting for rewards took {totals.reward_wait_s:.3g}s of {totals.step_time_s:.3g}s of GRPO "
            f"steps = {share:.0%} > pool.max_reward_wait_share={max_reward_wait_share:g}: {WAITING_ADVICE}; "
            f"{PLACEMENT_ADVICE}"
        )
    return warnings


def failure_reasons(blocks: list[EncodedResults], most: int = 3) -> list[str]:
    """Up to `most` distinct reasons of the errored or timed-out items, in item order."""
    reasons: list[str] = []
    for block in blocks:
        for i, reason in block.reasons.items():
            if block.status_names[block.status_codes[i]] in (ERROR, TIMEOUT) and reason not in reasons:
                reasons.append(reason)
        if len(reasons) >= most:
            break
    return reasons[:most]


def check_error_rate(blocks: list[EncodedResults], stats: dict[str, float], threshold: float) -> None:
    """Raises RewardErrorRateExceeded when the batch fails the run by `failure_policy`'s rule,
    naming up to three distinct reasons (the pool's and an inline placement's rule alike)."""
    problem = error_rate_problem(BatchCounts.of_stats(stats), threshold)
    if problem is not None:
        raise RewardErrorRateExceeded(f"{problem}; first reasons: {failure_reasons(blocks)}")
