"""The pool's view of one worker actor: its health and its calls in flight, in execution order."""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Any

from actors.pool.work import Chunk


class WorkerState(enum.Enum):
    STARTING = "starting"  # created; waiting for its first ping
    HEALTHY = "healthy"  # takes calls
    RESTARTING = "restarting"  # killed or died; waiting for Ray to bring it back
    DEAD = "dead"  # will not come back (restarts used up, or it cannot start)


@dataclass(eq=False)
class Call:
    """One call of a worker in flight (`RewardWorker.call`)."""

    ref: Any  # ray.ObjectRef of its Reply
    chunk: Chunk
    started_at: float | None  # when it became the first call in its worker's queue (so began running)


class WorkerSlot:
    """A worker actor, its state, and its calls in flight (a sync actor runs them in order)."""

    def __init__(self, index: int, name: str, handle: Any, now: float):
        self.index = index  # the worker's number in the pool, never reused (its name's)
        self.name = name
        self.handle = handle
        self.state = WorkerState.STARTING
        self.calls: deque[Call] = deque()
        self.pid: int | None = None
        self.restarts = 0
        self.down_since = now  # start of the current STARTING / RESTARTING period
        self.ping_ref: Any = None
        self.next_ping_at = now
        self.dead_reason: str | None = None
        self.rss_mb: float | None = None  # resident memory its process reported after its last call
        self.recycling = False  # past pool.max_worker_rss_mb: takes no new calls, recycled once idle
        self.recycled = 0
        self.recycled_pid: int | None = None  # the process recycled, until its successor answers
        self.retiring = False  # takes no new calls; leaves the pool once those it has are done

    @property
    def items_in_flight(self) -> int:
        return sum(len(c.chunk) for c in self.calls)

    def takes(self, chunk: Chunk, max_in_flight: int) -> bool:
        """Whether `chunk` may be sent now: a healthy worker with room, where a suspect chunk (one
        that a worker died under) runs alone. When a worker dies with several calls queued, which
        one it died under is a guess (the reply of a call it had finished can die with it), and a
        suspect's next death is blamed on its items: alone, that blame is certain."""
        if self.state is not WorkerState.HEALTHY or self.recycling or self.retiring:
            return False
        if chunk.suspect or any(call.chunk.suspect for call in self.calls):
            return not self.calls
        return len(self.calls) < max_in_flight

    def head_deadline(self, timeout_s: float) -> float | None:
        """When the running call passes its deadline; None when idle."""
        if not self.calls or self.calls[0].started_at is None:
            return None
        return self.calls[0].started_at + timeout_s

    def remove(self, call: Call, now: float) -> None:
        """Forget a finished call; the next one in the queue starts running now."""
        self.calls.remove(call)
        if self.calls and self.calls[0].started_at is None:
            self.calls[0].started_at = now

    def take_all(self) -> list[Call]:
        """Every call in flight, the running one first (the worker is going down)."""
        calls = list(self.calls)
        self.calls.clear()
        return calls

    def go_down(self, now: float) -> None:
        self.state = WorkerState.RESTARTING
        self.down_since = now
        self.next_ping_at = now
        self.ping_ref = None
        self.recycling = False

    def recycle(self, now: float) -> None:
        """Its process is being replaced on purpose (killed idle, Ray starts a fresh one)."""
        self.recycled += 1
        self.recycled_pid, self.rss_mb = self.pid, None
        self.go_down(now)

    def came_back(self, pid: int) -> bool:
        """Book the process answering now; True when it is a restart (a new process not recycled)."""
        restarted = self.pid is not None and pid != self.pid and self.pid != self.recycled_pid
        if pid != self.pid:
            self.rss_mb = None
        self.pid, self.recycled_pid = pid, None
        return restarted
