"""How the trainer receives rewards, without knowing who computes them.

The trainer never imports `rewards/` or Ray. It is handed a `RewardSource`: `submit` a chunk of
completions as soon as it is sampled (returning at once when scoring runs elsewhere, so that
scoring overlaps the next micro-batch's sampling), then `collect` every ticket of the step.
`InlineRewards` adapts a plain callable for single-process use and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# The status of an item a reward declined to score (a user reward returned None): no reward, and
# its group leaves the update whatever grpo.on_unusable_reward says; it is counted, never a 0.
SKIPPED_STATUS = "skipped"


@dataclass(frozen=True)
class Rewards:
    """Scores of N items, in submission order."""

    values: list[float]  # [N] total reward; meaningful only where usable
    usable: list[bool]  # [N] False: no reward (timeout, error); the item's group is unusable
    statuses: list[str]  # [N] scorer status per item ("ok", "invalid", "timeout", "error", ...)
    stats: dict[str, float] = field(default_factory=dict)  # scorer-side metrics merged into the step's
    # The scorer's named components (a chess reward's validity, each user reward): name ->
    # (sum, count) over the items that have it. Additive, like `stats`; see `component_means`.
    components: dict[str, tuple[float, float]] = field(default_factory=dict)
    # What TRL-style rewards logged with `log_metric`: name -> (sum, count) over their calls.
    logged: dict[str, tuple[float, float]] = field(default_factory=dict)
    # What TRL-style rewards logged with `log_extra`: item index -> {column: value}, where logged.
    extras: dict[int, dict[str, Any]] = field(default_factory=dict)
    # Episodes only: each item's `episode_info` (JSON data; None where it reported none), for an
    # environment's own `aggregate_metrics` (`trainer.grpo.episode_rewards`); [] otherwise.
    episode_infos: list[dict[str, Any] | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (len(self.values) == len(self.usable) == len(self.statuses)):
            raise ValueError("Rewards fields must all have one entry per item")

    @staticmethod
    def concat(parts: Sequence[Rewards]) -> Rewards:
        stats: dict[str, float] = {}
        extras: dict[int, dict[str, Any]] = {}
        offset = 0
        for p in parts:
            for k, v in p.stats.items():
                stats[k] = stats.get(k, 0.0) + v
            extras.update({offset + i: e for i, e in p.extras.items()})
            offset += len(p.values)
        return Rewards(
            values=[v for p in parts for v in p.values],
            usable=[u for p in parts for u in p.usable],
            statuses=[s for p in parts for s in p.statuses],
            stats=stats,
            components=add_component_sums(p.components for p in parts),
            logged=add_component_sums(p.logged for p in parts),
            extras=extras,
            episode_infos=[info for p in parts for info in p.episode_infos],
        )

    def sliced(self, start: int, stop: int, *, sums: bool) -> Rewards:
        """Items [start, stop); with the additive figures (stats, components, logged) when `sums`
        (give them to one slice only: they add up)."""
        return Rewards(
            self.values[start:stop],
            self.usable[start:stop],
            self.statuses[start:stop],
            self.stats if sums else {},
            self.components if sums else {},
            self.logged if sums else {},
            {i - start: e for i, e in self.extras.items() if start <= i < stop},
            self.episode_infos[start:stop],
        )


def add_component_sums(
    parts: Iterable[Mapping[str, tuple[float, float]]],
) -> dict[str, tuple[float, float]]:
    """Component (sum, count) pairs of several collections added up, name by name."""
    out: dict[str, tuple[float, float]] = {}
    for part in parts:
        for name, (total, count) in part.items():
            was_total, was_count = out.get(name, (0.0, 0.0))
            out[name] = (was_total + total, was_count + count)
    return out


def component_means(components: Mapping[str, tuple[float, float]]) -> dict[str, float]:
    """Each component's mean over the items that have it; a component no item had is left out."""
    return {name: total / count for name, (total, count) in components.items() if count}


class RewardSource(Protocol):
    def submit(self, completions: list[str], targets: list[Any], *, fields: list[Any] | None = None) -> Any:
        """Queue a chunk for scoring; returns a ticket. May return before scoring is done.

        fields: one mapping per item (the data fields its rewards take by name), or None.
        """
        ...

    def collect(self, tickets: list[Any], timeout_s: float | None = None) -> Rewards:
        """All tickets' rewards, concatenated in ticket order."""
        ...


# A plain scorer: (completions, targets[, fields]) -> one float per item, or a full `Rewards`.
# It is given `fields` only for items that carry some (tasks whose rewards take data fields).
ScoreFn = Callable[..., "Sequence[float] | Rewards"]


class InlineRewards:
    """Scores synchronously inside `submit` (serial scoring: no overlap with sampling)."""

    def __init__(self, score_fn: ScoreFn):
        self._score_fn = score_fn

    def submit(
        self, completions: list[str], targets: list[Any], *, fields: list[Any] | None = None
    ) -> Rewards:
        out = call_scorer(self._score_fn, completions, targets, fields)
        if isinstance(out, Rewards):
            return out
        values = [float(v) for v in out]
        if len(values) != len(completions):
            raise ValueError(f"scorer returned {len(values)} rewards for {len(completions)} completions")
        return Rewards(values=values, usable=[True] * len(values), statuses=["ok"] * len(values))

    def collect(self, tickets: list[Rewards], timeout_s: float | None = None) -> Rewards:
        return Rewards.concat(tickets)


def call_scorer(
    score_fn: ScoreFn, completions: list[str], targets: list[Any], fields: list[Any] | None
) -> Any:
    """`score_fn(completions, targets)`, with `fields` as a third argument only when there are some."""
    if fields is None:
        return score_fn(completions, targets)
    return score_fn(completions, targets, fields)
