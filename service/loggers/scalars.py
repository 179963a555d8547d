"""A step or evaluation record as the scalars a logger shows: `{"train/loss": 0.41, "time/sample_s": 0.09}`.

Names come from the one catalogue (`actors.metric_names`); a key it does not list keeps its
record's group, so a new metric is never dropped on the way to a logger. Nested figures (a
task's held-out figures by game length) become `eval/<key>/<sub key>`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from actors.metric_names import RECORD_FIELDS, logger_name

RecordKind = Literal["step", "eval"]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _flatten(prefix: str, value: Any, out: dict[str, float]) -> None:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            _flatten(f"{prefix}/{key}", inner, out)
    elif (number := _number(value)) is not None:
        out[prefix] = number


def scalars(record: Mapping[str, Any], kind: RecordKind) -> dict[str, float]:
    """Every finite number of `record` under its logger name (None, NaN and text are left out)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if key not in RECORD_FIELDS:
            _flatten(logger_name(kind, key), value, out)
    return out
