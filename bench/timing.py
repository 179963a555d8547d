"""Timing utilities: interleaved repeats after a warm-up, and medians.

Every figure of the benchmark is a median of several timed repeats taken after untimed
warm-up calls. Variants that are compared with each other run interleaved (A, B, A, B, ...)
so that a burst of background load slows both alike instead of one of them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping


def median(values: list[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def interleaved_times(
    variants: Mapping[str, Callable[[int], object]], repeats: int, warmup: int
) -> dict[str, list[float]]:
    """Seconds of each timed call of each variant, variants alternating within every round.

    Each variant is called as `fn(round_index)` (rounds 0..warmup-1 are untimed), so it can use
    fresh data per round. Returns {name: [seconds of round warmup, ..., warmup+repeats-1]}.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats} warmup={warmup}")
    if not variants:
        raise ValueError("interleaved_times needs at least one variant")
    times: dict[str, list[float]] = {name: [] for name in variants}
    for round_index in range(warmup + repeats):
        for name, fn in variants.items():
            began = time.perf_counter()
            fn(round_index)
            elapsed = time.perf_counter() - began
            if round_index >= warmup:
                times[name].append(elapsed)
    return times
