"""A held-out set with the training data's mix of game lengths.

Each length L gets a quota of the n held-out positions in proportion to its share of training
(largest remainders). Lengths are filled in increasing order; a short length that has fewer
distinct held-out positions than its quota (1-ply games reach 20 positions, about one of them held
out) spreads its shortfall over the longer lengths in proportion to their quotas, and what the
last cannot fill goes back to earlier ones that have positions left. The result is interleaved by length, so its first items mix them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping

from trainer.data.pairs import Pair


def plies_of(prompt: str) -> int:
    """Half-moves of a SAN move list (`e4 e5 Nf3` -> 3)."""
    return len(prompt.split())


def length_quotas(n: int, weights: Mapping[int, float]) -> dict[int, int]:
    """n split over lengths in proportion to `weights` (largest remainders; ties to shorter)."""
    total = sum(weights.values())
    if n < 0 or total <= 0:
        raise ValueError(f"need n >= 0 and a positive total weight, got n={n}, weights={dict(weights)}")
    exact = {length: n * w / total for length, w in sorted(weights.items())}
    quotas = {length: int(x) for length, x in exact.items()}
    by_remainder = sorted(exact, key=lambda length: (-(exact[length] - quotas[length]), length))
    for length in by_remainder[: n - sum(quotas.values())]:
        quotas[length] += 1
    return quotas


def fill_by_length(quotas: Mapping[int, int], draw: Callable[[int, int], Iterable[Pair]]) -> list[Pair]:
    """Distinct held-out pairs per length; `draw(L, wanted)` yields length-L candidates (it may end
    early; `wanted` lets a generator give up sooner when few are asked for).

    Candidates whose target repeats one already taken are skipped (the caller passes a key-aware
    iterator when positions repeat under different spellings). Returns fewer than sum(quotas) only
    when every length ran out.
    """
    taken: dict[int, list[Pair]] = {length: [] for length in quotas}
    sources: dict[int, Iterator[Pair]] = {}
    plan = dict(quotas)
    order = sorted(quotas)
    carry = 0
    for i, length in enumerate(order):
        want = plan[length]
        sources[length] = iter(draw(length, want))
        taken[length] = list(itertools.islice(sources[length], want))
        carry = want - len(taken[length])
        rest = {later: float(quotas[later]) for later in order[i + 1 :] if quotas[later] > 0}
        if carry and rest:  # a short length's shortfall, spread over the longer ones as training is
            extra = length_quotas(carry, rest)
            for later, more in extra.items():
                plan[later] += more
            carry = 0
    for length in sorted(quotas):  # what the longest could not take, from any with positions left
        if carry == 0:
            break
        more = list(itertools.islice(sources[length], carry))
        taken[length] += more
        carry -= len(more)
    rows = itertools.zip_longest(*(taken[length] for length in sorted(taken)))
    return [p for row in rows for p in row if p is not None]
