"""User rewards for the FEN task that each misbehave in one way (`reward.user: [{fn: "examples.rewards.misbehaving:slow"}]`).

- `slow`: a correct reward (1.0 for an exact FEN) that takes `SLOW_S` seconds an item (set
  `GRPO_EXAMPLE_SLOW_S` to change it): healthy, only expensive.
- `always_raises`: raises on every item, as a reward with a bug in its first line does.
- `raises_one_in_six`: raises on about one item in six (those whose text hashes to 0 mod 6).
- `noisy`: the exact-match reward plus random noise: the same completion scores differently twice.
- `not_a_number`: returns a string.
- `raises_unless_exact`: raises on every answer but the exact target.
- `nan_one_in_three`: returns NaN on about one item in three (those whose text hashes to 0 mod 3).
- `breaks_after_calls`: a correct reward until a process has called it `GRPO_EXAMPLE_BREAK_AFTER`
  times (default 20: a run's first GRPO step on the pool), then raises on every item, as a
  reward whose service went away does; the preflight's few items pass.
- `async_slow_one_in_six`: an `async def` reward that waits `SLOW_S` seconds on about one item in
  six (those whose text hashes to 1 mod 6) and answers the others at once.
- `leaks_memory`: a correct reward that keeps `GRPO_EXAMPLE_LEAK_KB` KiB (default 1024) of every
  item it scores for as long as its process lives, as a reward caching into a global does: a
  worker's RSS grows step after step (`pool.max_worker_rss_mb` recycles it).
- `prints_a_lot`: a correct reward that prints `GRPO_EXAMPLE_PRINT_KB` KiB (default 1024) of text
  for every item, as a reward left with a debugging print of a whole board history does.
- `constant`: 0.5 for every answer, as a reward that compares the wrong fields does: it never
  fails, and teaches nothing (GRPO's advantages are differences within a group).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
import zlib

SLOW_S = float(os.environ.get("GRPO_EXAMPLE_SLOW_S", "0.2"))


def slow(completion: str, target: str) -> float:
    time.sleep(SLOW_S)
    return 1.0 if completion == target else 0.0


def always_raises(completion: str, target: str) -> float:
    raise KeyError("board")


def raises_one_in_six(completion: str, target: str) -> float:
    if zlib.crc32(f"<{completion}>".encode()) % 6 == 0:
        raise ValueError("this completion breaks the reward")
    return 1.0 if completion == target else 0.0


def noisy(completion: str, target: str) -> float:
    return (1.0 if completion == target else 0.0) + random.random()


def constant(completion: str, target: str) -> float:
    return 0.5


def not_a_number(completion: str, target: str) -> str:
    return "high"


def raises_unless_exact(completion: str, target: str) -> float:
    """Raises on every wrong answer: a perfect answer scores, anything a policy writes fails."""
    if completion != target:
        raise ValueError("expected the exact FEN")
    return 1.0


def nan_one_in_three(completion: str, target: str) -> float:
    if zlib.crc32(f"<{completion}>".encode()) % 3 == 0:
        return float("nan")
    return 1.0 if completion == target else 0.0


_calls = itertools.count(1)


def breaks_after_calls(completion: str, target: str) -> float:
    if next(_calls) > int(os.environ.get("GRPO_EXAMPLE_BREAK_AFTER", "20")):
        raise ConnectionError("the scoring service went away")
    return 1.0 if completion == target else 0.0


async def async_slow_one_in_six(completion: str, target: str) -> float:
    if zlib.crc32(f"<{completion}>".encode()) % 6 == 1:
        await asyncio.sleep(SLOW_S)
    return 1.0 if completion == target else 0.0


_kept: list[bytes] = []


def leaks_memory(completion: str, target: str) -> float:
    _kept.append(b"\x01" * (int(os.environ.get("GRPO_EXAMPLE_LEAK_KB", "1024")) * 1024))  # pages touched
    return 1.0 if completion == target else 0.0


def prints_a_lot(completion: str, target: str) -> float:
    kib = int(os.environ.get("GRPO_EXAMPLE_PRINT_KB", "1024"))
    line = f"checking {completion[:40]!r} against {target[:40]!r} " + "." * 60 + "\n"
    print(line * (kib * 1024 // len(line) + 1), end="")
    return 1.0 if completion == target else 0.0
