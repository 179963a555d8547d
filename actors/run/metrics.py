"""The run's own metrics, exported with `ray.util.metrics` (Prometheus and the dashboard's metrics view).

Every series carries the tags `run_id` and `phase` (`sft` | `grpo`). Prometheus sees the names
with Ray's `ray_` prefix, e.g. `ray_grpo_reward_mean`. The names come from the one catalogue,
`actors.metric_names` (`METRIC_NAMES` lists the run's series).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ray.util.metrics import Counter, Gauge

from actors.metric_names import (
    EVAL_METRICS,
    METRIC_NAMES,
    RUN_TAG_KEYS,
    SKIPPED_COUNTER,
    STEP_METRICS,
    STEPS_COUNTER,
    Metric,
)

TAG_KEYS = RUN_TAG_KEYS

# Record key -> (series, description), for the numbers the catalogue exports.
STEP_GAUGES: dict[str, tuple[str, str]] = {
    m.key: (m.series, m.description) for m in STEP_METRICS if m.series and not m.tag
}
EVAL_GAUGES: dict[str, tuple[str, str]] = {
    m.key: (m.series, m.description) for m in EVAL_METRICS if m.series and not m.tag
}
# Record key -> the catalogue entry, for the {name: number} figures it exports (one series per name).
STEP_TAGGED: dict[str, Metric] = {m.key: m for m in STEP_METRICS if m.series and m.tag}


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
        self._tagged = {
            key: (m.tag, Gauge(m.series, m.description, tag_keys=(*TAG_KEYS, m.tag)))
            for key, m in STEP_TAGGED.items()
        }
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
        for key, (tag, gauge) in self._tagged.items():
            figure = record.get(key)
            for name, inner in figure.items() if isinstance(figure, Mapping) else ():
                if (value := _finite(inner)) is not None:
                    gauge.set(value, tags={**tags, tag: str(name)})
        self._steps.inc(1, tags=tags)
        if (_finite(record.get("skipped")) or 0.0) > 0:
            self._skipped.inc(1, tags=tags)

    def record_eval(self, record: Mapping[str, Any]) -> None:
        tags = self._tags(str(record.get("phase", "")))
        for key, gauge in self._eval.items():
            value = _finite(record.get(key))
            if value is not None:
                gauge.set(value, tags=tags)


__all__ = [
    "EVAL_GAUGES",
    "METRIC_NAMES",
    "SKIPPED_COUNTER",
    "STEPS_COUNTER",
    "STEP_GAUGES",
    "STEP_TAGGED",
    "TAG_KEYS",
    "RunMetrics",
]
