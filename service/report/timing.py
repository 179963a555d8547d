"""Where a GRPO step's time goes: sampling, waiting for rewards, the reference pass, the update.

`step_time_split(metrics)` reads the per-step timings of metrics.jsonl (`sample_s`,
`reward_wait_s`, `ref_s`, `update_s`; whatever is left of `step_time_s` is `other`), and the
two drawing functions stack them per step, in seconds and as shares of the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# (record key, label, colour), bottom to top.
PARTS: tuple[tuple[str, str, str], ...] = (
    ("sample_s", "sampling", "tab:blue"),
    ("reward_wait_s", "reward wait", "tab:red"),
    ("ref_s", "reference", "tab:orange"),
    ("update_s", "update", "tab:green"),
)
OTHER = ("other", "other", "tab:gray")


@dataclass
class TimeSplit:
    steps: list[int] = field(default_factory=list)
    seconds: dict[str, list[float]] = field(default_factory=dict)  # part key -> one value per step

    def __bool__(self) -> bool:
        return bool(self.steps)

    def mean_share(self) -> dict[str, float]:
        """Each part's share of the summed step time."""
        total = sum(sum(values) for values in self.seconds.values())
        return {key: (sum(values) / total if total else 0.0) for key, values in self.seconds.items()}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def step_time_split(metrics: Sequence[dict[str, Any]]) -> TimeSplit:
    """The split of every GRPO step that carries its step time (others are left out)."""
    split = TimeSplit(seconds={key: [] for key, _, _ in (*PARTS, OTHER)})
    for row in metrics:
        total = _number(row.get("step_time_s"))
        if row.get("phase") != "grpo" or total is None:
            continue
        parts = {key: max(0.0, _number(row.get(key)) or 0.0) for key, _, _ in PARTS}
        parts[OTHER[0]] = max(0.0, total - sum(parts.values()))
        split.steps.append(int(row["step"]))
        for key, value in parts.items():
            split.seconds[key].append(value)
    return split


def draw_step_time(ax, metrics: Sequence[dict[str, Any]]) -> None:
    """Seconds per GRPO step, stacked by part."""
    split = step_time_split(metrics)
    if split:
        parts = (*PARTS, OTHER)
        ax.stackplot(
            split.steps,
            [split.seconds[key] for key, _, _ in parts],
            labels=[label for _, label, _ in parts],
            colors=[color for _, _, color in parts],
            alpha=0.85,
        )
        ax.legend(fontsize=7, loc="upper left", ncol=3)
    ax.set_ylabel("seconds")
    ax.set_title("GRPO step time split")


def draw_step_share(ax, metrics: Sequence[dict[str, Any]]) -> None:
    """Each part's share of every GRPO step (the stack sums to 1)."""
    split = step_time_split(metrics)
    if split:
        parts = (*PARTS, OTHER)
        totals = [sum(values) for values in zip(*(split.seconds[key] for key, _, _ in parts), strict=True)]
        shares = [
            [value / total if total else 0.0 for value, total in zip(split.seconds[key], totals, strict=True)]
            for key, _, _ in parts
        ]
        means = split.mean_share()
        ax.stackplot(
            split.steps,
            shares,
            labels=[f"{label} {means[key]:.0%}" for key, label, _ in parts],
            colors=[color for _, _, color in parts],
            alpha=0.85,
        )
        ax.legend(fontsize=7, loc="lower left", ncol=3)
    ax.set_ylim(0, 1)
    ax.set_title("share of the GRPO step (mean over the run)")


def draw_pool_size(ax, metrics: Sequence[dict[str, Any]]) -> None:
    """An autoscaled pool's size over the GRPO steps, on a second axis of `ax` (beside the reward
    wait's share it follows); nothing for a pool that kept one size."""
    rows = [r for r in metrics if r.get("phase") == "grpo" and "pool_workers" in r]
    if len({r["pool_workers"] for r in rows}) < 2:
        return
    size = ax.twinx()
    steps, workers = [r["step"] for r in rows], [r["pool_workers"] for r in rows]
    size.step(steps, workers, where="post", color="black", linewidth=1.5, label="reward workers")
    size.set_ylim(0, max(workers) + 1)
    size.yaxis.get_major_locator().set_params(integer=True)
    size.set_ylabel("reward workers")
    size.legend(fontsize=7, loc="upper right")
