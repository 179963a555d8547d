"""The run's own metrics, exported with `ray.util.metrics` (Prometheus and the dashboard's metrics view).

Every series carries the tags `run_id` and `phase` (`sft` | `grpo`). Prometheus sees the names
with Ray's `ray_` prefix, e.g. `ray_grpo_reward_mean`. `METRIC_NAMES` lists every name in one
place, for dashboards and for tests that read a node's export.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ray.util.metrics import Counter, Gauge

TAG_KEYS = ("run_id", "phase")

# Per-step gauges: key of the step record -> (metric name, description).
STEP_GAUGES: dict[str, tuple[str, str]] = {
    "step": ("grpo_step", "global step just finished (SFT and GRPO share one counter)"),
    "loss": ("grpo_loss", "training loss of the step"),
    "reward_mean": ("grpo_reward_mean", "mean reward of the step's sampled completions"),
    "kl": ("grpo_kl", "KL(policy || reference), k3 estimate, token mean"),
    "entropy": ("grpo_entropy", "policy entropy of sampled tokens"),
    "step_time_s": ("grpo_step_time_s", "wall time of the step"),
    "completions_per_s": ("grpo_completions_per_s", "completions sampled and scored per second (per rank)"),
    "reward_wait_s": ("grpo_reward_wait_s", "time the step blocked waiting for rewards"),
}
# Held-out evaluation gauges: key of the eval record -> (metric name, description).
EVAL_GAUGES: dict[str, tuple[str, str]] = {
    "reward_mean": ("grpo_eval_reward_mean", "held-out mean reward of greedy completions"),
    "exact_match": ("grpo_eval_exact_match", "held-out share of completions equal to their target"),
    "valid_rate": ("grpo_eval_valid_rate", "held-out share of completions scored with status ok"),
}
STEPS_COUNTER = ("grpo_steps", "optimiser steps finished")
SKIPPED_COUNTER = ("grpo_skipped_steps", "steps whose update was skipped (non-finite loss or gradients)")

METRIC_NAMES: tuple[str, ...] = (
    *(name for name, _ in STEP_GAUGES.values()),
    *(name for name, _ in EVAL_GAUGES.values()),
    STEPS_COUNTER[0],
    SKIPPED_COUNTER[0],
)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


class RunMetrics:
    """Gauges and counters of one run; built where they are recorded, never at import."""

    def __init__(self, run_id: str):
        self._run_id = run_id
        self._step = {key: Gauge(name, desc, tag_keys=TAG_KEYS) for key, (name, desc) in STEP_GAUGES.items()}
        self._eval = {key: Gauge(name, desc, tag_keys=TAG_KEYS) for key, (name, desc) in EVAL_GAUGES.items()}
        self._steps = Counter(*STEPS_COUNTER, tag_keys=TAG_KEYS)
        self._skipped = Counter(*SKIPPED_COUNTER, tag_keys=TAG_KEYS)

    def _tags(self, phase: str) -> dict[str, str]:
        return {"run_id": self._run_id, "phase": phase}

    def record_step(self, record: Mapping[str, Any]) -> None:
        """One step record (keys of STEP_GAUGES, `phase`, `skipped`); missing or non-finite values are left out."""
        tags = self._tags(str(record.get("phase", "")))
        for key, gauge in self._step.items():
            value = _finite(record.get(key))
            if value is not None:
                gauge.set(value, tags=tags)
        self._steps.inc(1, tags=tags)
        if (_finite(record.get("skipped")) or 0.0) > 0:
            self._skipped.inc(1, tags=tags)

    def record_eval(self, record: Mapping[str, Any]) -> None:
        tags = self._tags(str(record.get("phase", "")))
        for key, gauge in self._eval.items():
            value = _finite(record.get(key))
            if value is not None:
                gauge.set(value, tags=tags)
