"""Stepping several episodes at once, for environments that wait (a tool call, a remote service).

An environment class opts in with `concurrent_steps = N`: its instances share nothing that is not
thread-safe, so up to N of its episodes' steps may run at once on threads of the process that
holds them (a reward worker, or the trainer with `task.hosting: local`). The default, 1, steps
them one after another, as a CPU-bound environment or one sharing an engine per process needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def map_steps(fn: Callable[[T], Any], items: Sequence[T], concurrent: int) -> list[Any]:
    """fn over items, in order, up to `concurrent` at once (threads joined before it returns)."""
    if concurrent <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(concurrent, len(items)), thread_name_prefix="env-step") as pool:
        return list(pool.map(fn, items))
