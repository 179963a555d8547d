"""User rewards for the pool tests, importable by reward workers as 'user_rewards:<name>'.

Each misbehaves only on completions carrying its marker, so one poison item can sit among
ordinary ones.
"""

from __future__ import annotations

import os
import signal

from tests.company import Company

HANG = "HANG"
RAISE = "RAISE"
CRASH = "CRASH"


def length_bonus(completion: str, target: str) -> float:
    """A well-behaved reward: 1 when the completion is as long as the target."""
    return 1.0 / (1.0 + abs(len(completion) - len(target)))


def spins_on_marker(completion: str, target: str) -> float:
    """Spins forever (holding the interpreter) on a completion containing HANG."""
    if HANG in completion:
        while True:
            pass
    return 0.5


def raises_on_marker(completion: str, target: str) -> float:
    """Raises on a completion containing RAISE."""
    if RAISE in completion:
        raise RuntimeError("marker seen")
    return 0.5


def kills_process_on_marker(completion: str, target: str) -> float:
    """Kills its own process (as a crashing C extension would) on a completion containing CRASH."""
    if CRASH in completion:
        os.kill(os.getpid(), signal.SIGKILL)
    return 0.5


def sum_of_fields(completion: str, a: int, b: int) -> float:
    """Takes row fields by name: 1 when the completion is the sum of the row's a and b."""
    return 1.0 if completion == str(a + b) else 0.0


async def waits_20ms(completion: str, target: str) -> float:
    """An I/O-bound reward: answers after 20 ms of waiting (an HTTP verifier, an LLM judge)."""
    import asyncio

    await asyncio.sleep(0.02)
    return 1.0 if completion == target else 0.5


async def awaits_forever_on_marker(completion: str, target: str) -> float:
    """Waits forever inside an async call on a completion containing HANG (a server that never answers)."""
    import asyncio

    if HANG in completion:
        await asyncio.Event().wait()
    return 0.5


# 16 items of one worker process waiting at once: only items scored side by side get there.
_company = Company(16)


async def waits_for_company(completion: str, target: str) -> float:
    """An I/O-bound reward that answers 1.0 once 16 items of its process have waited at once."""
    return 1.0 if await _company.wait_async() else 0.0


def blocks_for_company(completion: str, target: str) -> float:
    """A plain reward that blocks (ask for threads) until 16 items of its process have blocked at
    once, then answers 1.0."""
    return 1.0 if _company.wait() else 0.0


class CountsItsSetup:
    """A class reward: built once per worker process; reports that process's setups and its own calls."""

    setups = 0

    def setup(self) -> None:
        type(self).setups += 1
        self.calls = 0

    def __call__(self, completion: str, target: str) -> float:
        self.calls += 1
        return float(type(self).setups * 1000 + os.getpid() % 1000) if completion == "WHO" else 0.5


class HoldsItsEngine:
    """A class reward holding a resource (an engine) that one HANG item never releases."""

    def setup(self) -> None:
        import threading

        self.engine = threading.Lock()

    def __call__(self, completion: str, target: str) -> float:
        self.engine.acquire()
        if HANG in completion:
            self.engine.acquire()  # never released: this call, and any after it, would wait forever
        self.engine.release()
        return 0.5


def sleeps_forever_on_marker(completion: str, target: str) -> float:
    """Blocks (sleeping, not spinning) forever on a completion containing HANG."""
    import time

    while HANG in completion:
        time.sleep(0.05)
    return 0.5


# The time the rewards below have taken in this process, by their own account: a clock that moves
# only when they score. Reward workers that time their calls by it (`RewardPool.create`'s
# `worker_clock`) report a known cost per item, whatever the machine and its load.
_scored_s = [0.0]


def scoring_clock() -> float:
    """Seconds the known-cost rewards of this process have taken so far."""
    return _scored_s[0]


def costs_a_microsecond(completion: str, target: str) -> float:
    """A cheap reward: 1 us an item on `scoring_clock`."""
    _scored_s[0] += 1e-6
    return 0.5


def costs_a_millisecond(completion: str, target: str) -> float:
    """A costly reward: 1 ms an item on `scoring_clock`."""
    _scored_s[0] += 1e-3
    return 0.5
