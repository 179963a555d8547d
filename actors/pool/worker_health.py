"""Worker health: pings the workers that are starting or coming back, and says which are dead.

A worker is down from its creation, a kill or a death until it answers a ping. The dispatcher's
thread calls these methods under its lock, each turn; nothing here blocks or holds a lock of its
own. When every worker is dead, `fatal` says why, and the dispatcher stops taking work.
"""

from __future__ import annotations

import logging
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError

from actors.pool.config import PoolConfig
from actors.pool.metrics import PoolMetrics
from actors.pool.node_resources import describe_placement
from actors.pool.worker_slot import WorkerSlot, WorkerState

logger = logging.getLogger(__name__)

_PING_BACKOFF_S = 0.2
_DIED_PINGS_TO_GIVE_UP = 3  # consecutive ActorDiedError answers: restarts are used up


class WorkerHealth:
    """The pings in flight, the restarts counted, and the pool's verdict once no worker is left."""

    def __init__(self, slots: list[WorkerSlot], cfg: PoolConfig, metrics: PoolMetrics, owns_workers: bool):
        self._slots = slots
        self._cfg = cfg
        self._metrics = metrics
        self._owns_workers = owns_workers
        self.pings: dict[Any, WorkerSlot] = {}
        self._died_pings: dict[int, int] = {}
        self.restarts = 0
        self.fatal: str | None = None

    def send_pings(self, now: float) -> None:
        for slot in self._slots:
            if _is_down(slot) and slot.ping_ref is None and now >= slot.next_ping_at:
                slot.ping_ref = slot.handle.ping.remote()
                self.pings[slot.ping_ref] = slot

    def next_ping_at(self) -> float | None:
        """When the next ping is due (a down worker with none in flight); None if none is."""
        due = [s.next_ping_at for s in self._slots if _is_down(s) and s.ping_ref is None]
        return min(due, default=None)

    def on_ping(self, ref: Any, ok: bool, value: Any, now: float) -> None:
        slot = self.pings.pop(ref)
        slot.ping_ref = None
        if ok:
            self._on_answer(slot, value, now)
            return
        # A worker that is restarting (a kill just before this pool attached, or one Ray is bringing
        # back) answers "unavailable": that is no constructor failure, so wait for it within
        # pool.start_timeout_s. Any other error while starting is the constructor's, and would recur.
        if slot.state is WorkerState.STARTING and not isinstance(value, ActorUnavailableError):
            self.mark_dead(slot, f"failed to start: {type(value).__name__}: {value}")
            return
        died = self._died_pings.get(slot.index, 0) + 1 if isinstance(value, ActorDiedError) else 0
        self._died_pings[slot.index] = died
        if died >= _DIED_PINGS_TO_GIVE_UP:
            self.mark_dead(slot, f"did not come back: {type(value).__name__}: {value}")
        else:
            slot.next_ping_at = now + _PING_BACKOFF_S

    def _on_answer(self, slot: WorkerSlot, pid: int, now: float) -> None:
        if slot.recycled_pid is not None and pid == slot.recycled_pid:
            slot.next_ping_at = now + _PING_BACKOFF_S  # the recycled process has not gone yet
            return
        if slot.came_back(pid):
            slot.restarts += 1
            self.restarts += 1
            self._metrics.restarted(slot.name)
        slot.state = WorkerState.HEALTHY
        self._died_pings.pop(slot.index, None)

    def forget(self, slot: WorkerSlot) -> None:
        """The worker left the pool: no ping of it is awaited any more."""
        self.pings.pop(slot.ping_ref, None)
        slot.ping_ref = None
        self._died_pings.pop(slot.index, None)

    def check_down_workers(self, now: float) -> None:
        """A worker down for longer than its start or restart limit is dead."""
        for slot in self._slots:
            if not _is_down(slot):
                continue
            starting = slot.state is WorkerState.STARTING
            limit = self._cfg.start_timeout_s if starting else self._cfg.restart_timeout_s
            if now - slot.down_since > limit:
                self.pings.pop(slot.ping_ref, None)
                slot.ping_ref = None
                key = "start_timeout_s" if starting else "restart_timeout_s"
                self.mark_dead(slot, f"did not answer within pool.{key}={limit:g}s")

    def mark_dead(self, slot: WorkerSlot, reason: str) -> None:
        slot.state, slot.dead_reason = WorkerState.DEAD, reason
        logger.error("reward worker %s is dead: %s", slot.name, reason)
        if self._owns_workers:
            kill_worker(slot.handle, restart=False)
        alive = sum(1 for s in self._slots if s.state is not WorkerState.DEAD)
        if alive:
            logger.error("the reward pool goes on with %d of %d workers", alive, len(self._slots))
            return
        reasons = "; ".join(f"{s.name}: {s.dead_reason}" for s in self._slots)
        need = f"{self._cfg.cpus_per_worker:g} CPU{describe_placement(self._cfg.resources, self._cfg.label_selector)}"
        self.fatal = (
            f"all {len(self._slots)} reward workers are dead ({reasons}); a worker needs {need}, "
            "and no live node took one"
        )[:4000]


def kill_worker(handle: Any, *, restart: bool) -> None:
    try:
        ray.kill(handle, no_restart=not restart)
    except Exception:  # already gone: nothing left to stop
        pass


def _is_down(slot: WorkerSlot) -> bool:
    return slot.state in (WorkerState.STARTING, WorkerState.RESTARTING)
