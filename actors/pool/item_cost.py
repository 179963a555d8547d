"""The workers' measured scoring time per item, and the smallest piece worth a call of its own.

A call costs about a millisecond on the two ends together (Ray's task submission and reply, the
result's encoding and decoding), whatever it carries. On a 2-core AMD EPYC, 64 FEN items took
1.4 ms of wall time as one call and 1.9 ms as two, while scoring them took under half a
millisecond: spreading a small submission of a cheap reward over the workers only adds calls.
So the pool spreads a submission only in pieces that each carry at least `pool.spread_min_s` of
scoring at the cost per item its workers have reported; until they have, `min_chunk_size` alone
decides, as it always has.
"""

from __future__ import annotations

import math

# Weight of the newest call in the running mean: a few calls follow a change of reward cost (a
# policy whose completions get longer) without one slow call swinging the plan.
_NEWEST_WEIGHT = 0.25


class ItemCost:
    """A running mean of seconds per item over the calls the workers have answered."""

    def __init__(self) -> None:
        self.seconds_per_item: float | None = None

    def add(self, busy_s: float, items: int) -> None:
        """One call's time inside the worker (`busy_s`) for `items` items."""
        if items < 1 or not busy_s >= 0.0:  # NaN or negative: a clock this cannot use
            return
        cost = busy_s / items
        old = self.seconds_per_item
        self.seconds_per_item = cost if old is None else old + _NEWEST_WEIGHT * (cost - old)

    def min_piece(self, min_chunk_size: int, spread_min_s: float) -> int:
        """The fewest items a piece of a spread submission may hold: `min_chunk_size`, raised to
        what takes `spread_min_s` to score at the measured cost (not raised before a measure)."""
        cost = self.seconds_per_item
        if spread_min_s <= 0.0 or cost is None:
            return min_chunk_size
        if cost <= 0.0:
            return max(min_chunk_size, 2**31)  # free items: never worth a second call
        return max(min_chunk_size, math.ceil(spread_min_s / cost))
