"""Rewards of a known cost for the `reward-cost` benchmark, importable by reward workers by name.

CPU-bound ones burn a fixed amount of this thread's CPU time (`time.thread_time`, not the clock),
so on a shared core they take longer, as real CPU work does; I/O-bound ones are `async def` and
only wait (an HTTP verifier, an LLM judge). Each returns a constant: the cost is the point.
"""

from __future__ import annotations

import asyncio
import time

SPEC = "bench.cost_rewards:"


def _burn(seconds: float) -> float:
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1
    return 0.5


def cpu_1ms(completion: str, target: str) -> float:
    return _burn(0.001)


def cpu_5ms(completion: str, target: str) -> float:
    return _burn(0.005)


async def io_20ms(completion: str, target: str) -> float:
    await asyncio.sleep(0.02)
    return 0.5


async def io_100ms(completion: str, target: str) -> float:
    await asyncio.sleep(0.1)
    return 0.5


# name in the tables -> (user reward spec or None for the bundled FEN reward alone, waits rather than computes)
COSTS: dict[str, tuple[str | None, bool]] = {
    "fen (~0.02 ms CPU)": (None, False),
    "cpu 1 ms": (SPEC + "cpu_1ms", False),
    "cpu 5 ms": (SPEC + "cpu_5ms", False),
    "io 20 ms (async)": (SPEC + "io_20ms", True),
    "io 100 ms (async)": (SPEC + "io_100ms", True),
}
