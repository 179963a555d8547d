"""Summaries of greedy completions on held-out pairs: exact match, validity, mean reward."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from trainer.grpo.reward_source import Rewards


def normalise_scores(out: Any, n: int) -> tuple[list[float], list[str] | None]:
    """(rewards, statuses or None) from what a scorer returned for `n` completions.

    Accepts a `Rewards`, a sequence of numbers, or a sequence of results with `.total` and
    `.status` (what `rewards.score_batch` returns).
    """
    if isinstance(out, Rewards):
        values, statuses = list(out.values), list(out.statuses)
    else:
        items = list(out)
        if items and hasattr(items[0], "total"):
            values = [float(r.total) for r in items]
            statuses = [str(r.status) for r in items] if hasattr(items[0], "status") else None
        else:
            values, statuses = [float(v) for v in items], None
    if len(values) != n:
        raise ValueError(f"scorer returned {len(values)} rewards for {n} completions")
    return values, statuses


def summarise_eval(
    prompts: Sequence[str],
    targets: Sequence[str],
    completions: Sequence[str],
    values: Sequence[float],
    statuses: Sequence[str] | None,
    n_samples: int,
) -> dict[str, Any]:
    """exact_match and reward_mean (floats), valid_rate (share of status 'ok'; None without
    statuses), count, and the first `n_samples` examples as dicts."""
    n = len(completions)
    if n == 0:
        raise ValueError("evaluation needs at least one pair")
    finite = [v for v in values if math.isfinite(v)]
    samples = []
    for i in range(min(n_samples, n)):
        sample = {
            "prompt": prompts[i],
            "target": targets[i],
            "completion": completions[i],
            "reward": values[i],
        }
        if statuses is not None:
            sample["status"] = statuses[i]
        samples.append(sample)
    return {
        "exact_match": sum(c == t for c, t in zip(completions, targets, strict=True)) / n,
        "valid_rate": None if statuses is None else sum(s == "ok" for s in statuses) / n,
        "reward_mean": sum(finite) / len(finite) if finite else float("nan"),
        "count": n,
        "samples": samples,
    }
