"""A deterministic, realistic mix of completions for measuring reward throughput.

What a policy emits during GRPO on the FEN task, roughly: exact hits, near-misses of the
target (a few edited characters, a wrong field, missing fields, chatter around a FEN), the
same answer again within a group, and junk (random FEN-alphabet strings, arbitrary unicode
with NULs and lone surrogates, blanks, the occasional runaway string beyond max_chars).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

# Default proportions of each kind (they sum to 1).
MIX: dict[str, float] = {"exact": 0.25, "near_miss": 0.40, "repeat": 0.10, "junk": 0.25}

FEN_ALPHABET = "pnbrqkPNBRQK12345678/ wb-KQkqabcdefgh0123456789"
_UNICODE_POOL = "\x00\t\n\ud800\udfff\u00e9\u2603\u4e2d\U0001f600é~!?{}[]<>" + FEN_ALPHABET
_FIELD_GUESSES = {1: ["w", "b"], 2: ["-", "KQkq", "Kq", "k"], 3: ["-", "e3", "d6"]}
_LONG_JUNK_EVERY = 25  # one junk string in this many runs past any sensible max_chars


def realistic_completions(
    targets: Sequence[str], seed: int = 0, mix: Mapping[str, float] | None = None
) -> list[str]:
    """One completion per target, drawn by kind with the `mix` proportions (default `MIX`).

    The same (targets, seed, mix) gives the same list on any machine. `repeat` copies an
    earlier completion for the same target (or a near-miss when there is none yet).
    """
    weights = _check_mix(MIX if mix is None else mix)
    if not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    rng = random.Random(seed)
    kinds, probs = list(weights), list(weights.values())
    out: list[str] = []
    earlier: dict[str, list[str]] = {}
    for target in targets:
        kind = rng.choices(kinds, probs)[0]
        if kind == "exact":
            completion = target
        elif kind == "repeat" and earlier.get(target):
            completion = rng.choice(earlier[target])
        elif kind == "junk":
            completion = junk(rng)
        else:
            completion = near_miss(target, rng)
        earlier.setdefault(target, []).append(completion)
        out.append(completion)
    return out


def near_miss(target: str, rng: random.Random) -> str:
    """The target with a small, plausible mistake."""
    fields = target.split(" ")
    pick = rng.random()
    if pick < 0.45:
        return _char_edits(target, rng, rng.randint(1, 3))
    if pick < 0.70 and len(fields) == 6:
        i = rng.randrange(1, 6)  # side, castling, en passant, halfmove, fullmove
        fields[i] = rng.choice(_FIELD_GUESSES[i]) if i in _FIELD_GUESSES else str(rng.randint(0, 40))
        return " ".join(fields)
    if pick < 0.80:
        return " ".join(fields[: rng.randint(1, max(1, len(fields) - 1))])  # missing trailing fields
    if pick < 0.90:
        return (
            rng.choice(["FEN: ", "The position is ", "", "```"])
            + target
            + rng.choice([".", "", " ```", "\n"])
        )
    return _char_edits(target, rng, rng.randint(4, 12))


def junk(rng: random.Random) -> str:
    """Something that is not a FEN at all."""
    pick = rng.random()
    if pick < 1 / _LONG_JUNK_EVERY:
        return "".join(rng.choice(FEN_ALPHABET) for _ in range(rng.randint(600, 2000)))
    if pick < 0.5:
        return "".join(rng.choice(FEN_ALPHABET) for _ in range(rng.randint(0, 80)))
    if pick < 0.9:
        return "".join(rng.choice(_UNICODE_POOL) for _ in range(rng.randint(0, 40)))
    return rng.choice(["", " ", "\n\t ", "e4 e5 Nf3", "I don't know."])


def _char_edits(text: str, rng: random.Random, n: int) -> str:
    chars = list(text)
    for _ in range(n):
        op = rng.random()
        i = rng.randrange(len(chars) + 1)
        if op < 0.4 and i < len(chars):
            chars[i] = rng.choice(FEN_ALPHABET)
        elif op < 0.7 or not chars:
            chars.insert(i, rng.choice(FEN_ALPHABET))
        elif i < len(chars):
            del chars[i]
    return "".join(chars)


def _check_mix(mix: Mapping[str, float]) -> dict[str, float]:
    unknown = set(mix) - set(MIX)
    if unknown:
        raise ValueError(f"unknown completion kinds {sorted(unknown)}; allowed: {sorted(MIX)}")
    if any(not (w >= 0) for w in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"mix weights must be >= 0 with a positive sum, got {dict(mix)}")
    return dict(mix)
