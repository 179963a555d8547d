"""Comparing the records of two runs that should agree: every result equal, timings left out."""

from __future__ import annotations

import math
from typing import Any

SAME = 1e-9  # float rounding: both runs do the same arithmetic in the same order


def timing_key(key: str) -> bool:
    """Fields that measure the machine (time, a process's memory) or choose by a measured time (the
    reward placement), not results."""
    return (
        key == "time" or key.endswith(("_s", "_rss_mb", "_rss_mb_max")) or key.startswith("scorer_placement")
    )


def record_differences(ours: Any, theirs: Any, where: str) -> list[str]:
    """Where `ours` and `theirs` (records, lists of them) differ in anything but timings."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        keys = {k for k in ours.keys() | theirs.keys() if not timing_key(k)}
        return [
            d for k in sorted(keys) for d in record_differences(ours.get(k), theirs.get(k), f"{where}.{k}")
        ]
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [
            d
            for i, pair in enumerate(zip(ours, theirs, strict=True))
            for d in record_differences(*pair, f"{where}[{i}]")
        ]
    numbers = (int, float)
    if isinstance(ours, numbers) and isinstance(theirs, numbers) and not isinstance(ours, bool):
        same = math.isclose(ours, theirs, rel_tol=SAME, abs_tol=SAME)
    else:
        same = ours == theirs
    return [] if same else [f"{where}: {ours!r} != {theirs!r}"]
