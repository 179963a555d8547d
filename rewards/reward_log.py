"""What rewards log besides their values, as TRL and verl let them: TRL's `log_metric(name, value)`
(a step reports each name's mean, `reward_metrics`), TRL's `log_extra(column, values)` (one value
per item of the call, kept with each item's result and shown beside its completion in
rollouts.jsonl), and the other numbers of verl's dict results (counted here).
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def _finite_float(value: Any) -> float | None:
    """A finite real number (a Python or numpy number, or a one-element array or tensor) as a
    float; None for anything else."""
    if hasattr(value, "item") and not isinstance(value, numbers.Real):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):
            return None
    if isinstance(value, numbers.Real) and math.isfinite(float(value)):
        return float(value)
    return None


class RewardLog:
    """What rewards logged in this process: TRL's `log_extra` / `log_metric` calls and the other
    numeric keys of verl's dict results, counted by key, with the last value of each.

    `log_metric(name, value)` values are also summed by name (`metrics`: name -> (sum, count)) until
    `take_metrics` hands them on: a step reports each name's mean over the calls that logged it
    (`reward_metrics`), as TRL logs the mean of what its rewards logged between two log lines.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.last: dict[str, Any] = {}
        self.metrics: dict[str, tuple[float, float]] = {}

    def record(self, key: str, value: Any) -> None:
        self.counts[key] += 1
        self.last[key] = value

    def add_metric(self, name: str, value: Any) -> None:
        """One `log_metric` value; a name that is not text, or a value that is not a finite number,
        is only counted (TRL would fail to log it later)."""
        number = _finite_float(value)
        if isinstance(name, str) and number is not None:
            total, count = self.metrics.get(name, (0.0, 0.0))
            self.metrics[name] = (total + number, count + 1.0)

    def take_metrics(self) -> dict[str, tuple[float, float]]:
        """The `log_metric` sums since the last take, and forget them."""
        taken, self.metrics = self.metrics, {}
        return taken

    def trl_callables(
        self, name: str, extras: dict[str, list[Any]] | None = None
    ) -> tuple[Callable[..., None], Callable[..., None]]:
        """(log_extra, log_metric) as TRL gives them to a reward function. extras: where this call's
        `log_extra` columns go (column -> one JSON value per item of the call)."""

        def log_extra(column: str, values: Sequence[Any]) -> None:
            self.record(f"{name}/log_extra/{column}", list(values))
            listed = not isinstance(values, str | bytes | Mapping) and hasattr(values, "__len__")
            if extras is not None and isinstance(column, str) and listed:  # a list, an array, a tensor
                extras[column] = [json_value(v) for v in values]

        def log_metric(metric: str, value: float) -> None:
            self.record(f"{name}/log_metric/{metric}", value)
            self.add_metric(metric, value)

        return log_extra, log_metric


# Where an item's `log_extra` values wait, in the per-item dict of the TRL-style rewards' values
# (`Scorer.batch_done`), until its result is built; no user reward can have this name.
EXTRA_KEY = "\x00log_extra"
LOG_EXTRA = "log_extra"  # the key of an item's logged columns in its result's `info`
EXTRA_TEXT_CHARS = 1000  # a logged text is cut to this many characters


def json_value(value: Any) -> Any:
    """A logged value as rollouts.jsonl can hold it: None, a bool, an int, a finite float (else
    None), a text cut to EXTRA_TEXT_CHARS; a numpy or torch scalar as its number; anything else
    as its text."""
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):
            pass
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return (value if isinstance(value, str) else str(value))[:EXTRA_TEXT_CHARS]


def place_extras(
    done: Sequence[dict[str, Any] | None], index: Sequence[int], extras: Mapping[str, list]
) -> None:
    """One call's `log_extra` columns into the per-item values of the items it scored (`index`:
    their positions); a column without one value per item is left out (it cannot be aligned)."""
    for column, values in extras.items():
        if len(values) != len(index):
            continue
        for i, value in zip(index, values, strict=True):
            if done[i] is not None:
                done[i].setdefault(EXTRA_KEY, {})[column] = value


def take_logged_metrics(scorer: object) -> dict[str, tuple[float, float]]:
    """What a scorer's TRL-style rewards logged with `log_metric` since the last take, taken
    (`RewardLog.take_metrics`); nothing for a scorer without a log (an environment host)."""
    log = getattr(scorer, "reward_log", None)
    return log.take_metrics() if isinstance(log, RewardLog) else {}
