"""User rewards for the pool tests, importable by reward workers as 'user_rewards:<name>'.

Each misbehaves only on completions carrying its marker, so one poison item can sit among
ordinary ones.
"""

from __future__ import annotations

import os
import signal

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
