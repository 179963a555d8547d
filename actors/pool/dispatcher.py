"""The pool's dispatcher: sends queued chunks to workers and handles what comes back.

Each chunk is one `call(fn, items)` on a worker (`RewardWorker.call`); what it runs is the client's
(scores, episode steps), the deadlines, faults and recycling are the same for every call.
Why a background thread: calls have to progress while the trainer is busy sampling the next
micro-batch and not calling into the pool. The thread sits in one `ray.wait` over every call in
flight (never `ray.get` in a loop), refills a worker the moment a call finishes, enforces each
call's deadline, and pings killed workers until they are back (`worker_health.py`). A worker whose resident memory passes
`pool.max_worker_rss_mb` after a call takes no new calls, finishes those it has, and is then
replaced by a fresh process (recycled). Workers join (`add`) and leave (`retire`: no new calls,
gone once those it has are done) between calls. `enqueue` also dispatches at once what fits, so
a chunk starts without waiting for the thread's next look. All state is guarded by one lock;
Ray calls from two threads are safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayActorError

from actors.pool.config import PoolConfig
from actors.pool.errors import RewardPoolUnavailable
from actors.pool.item_cost import ItemCost
from actors.pool.metrics import PoolMetrics, RateWindow
from actors.pool.work import Chunk, Failed, Fault, after_fault, count_status
from actors.pool.worker import Reply
from actors.pool.worker_health import WorkerHealth, kill_worker
from actors.pool.worker_slot import Call, WorkerSlot, WorkerState
from actors.pool.worker_watch import output_notice
from rewards.result import ERROR

logger = logging.getLogger(__name__)

_FETCH_TIMEOUT_S = 60.0  # results are local once ray.wait says ready; this only guards against a bug
_FINISHED_GRACE_S = 0.2  # how long a death waits for the results its worker sent before it
_IDLE_SLEEP_S = 1.0
_GAUGE_EVERY_S = 1.0


class Dispatcher:
    """Owns the queue, the workers' slots and the thread that drives them."""

    def __init__(self, slots: list[WorkerSlot], cfg: PoolConfig, metrics: PoolMetrics, owns_workers: bool):
        self.slots = slots
        self._cfg = cfg
        self._metrics = metrics
        self._owns_workers = owns_workers
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: deque[Chunk] = deque()
        self._calls: dict[Any, tuple[WorkerSlot, Call]] = {}
        self._health = WorkerHealth(slots, cfg, metrics, owns_workers)
        self._fatal: str | None = None
        self.recycled = 0
        self.items_done = 0
        self.output_bytes = 0  # printed by the calls on the workers (captured, not shown)
        self._notices: list[str] = []  # one-off lines for the run's console, until taken
        self._said_output = self._said_recycle = False
        self._rate = RateWindow()
        self.item_cost = ItemCost()  # the workers' time per item: how far a submission spreads
        self._next_turn = 0  # the worker first in line among equally loaded ones
        self._next_gauge_at = 0.0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reward-pool-dispatcher", daemon=True)

    @property
    def restarts(self) -> int:
        return self._health.restarts

    # ---- caller side ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, reason: str) -> None:
        """Stop the thread; anyone waiting (now or later) gets RewardPoolUnavailable(reason)."""
        with self._changed:
            self._fatal = self._fatal or reason
            self._changed.notify_all()
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10.0)

    def enqueue(self, chunks: list[Chunk]) -> None:
        with self._lock:
            if self._fatal:
                raise RewardPoolUnavailable(self._fatal)
            self._queue.extend(chunks)
            self._dispatch_locked(time.monotonic())
        self._wake.set()

    def add(self, slot: WorkerSlot) -> None:
        """A worker joins the pool: it takes calls once it answers a ping (`WorkerHealth`)."""
        with self._lock:
            if self._fatal:
                raise RewardPoolUnavailable(self._fatal)
            self.slots.append(slot)
        self._wake.set()

    def retire(self, name: str) -> None:
        """The worker `name` takes no new calls and leaves the pool once those it has are done (its
        actor killed when this pool created it); its queued calls stay its own until then."""
        with self._lock:
            slot = next((s for s in self.slots if s.name == name and not s.retiring), None)
            if slot is None:
                raise ValueError(f"no worker named {name!r} in this pool")
            if all(s.retiring for s in self.slots if s is not slot):
                raise ValueError(f"{name!r} is the pool's last worker: a pool keeps at least one")
            slot.retiring = True
            self._let_retired_go_locked()
        self._wake.set()

    def wait_for(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Block until `done()` (checked under the lock) or timeout; raises if the pool is down."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not done():
                if self._fatal:
                    raise RewardPoolUnavailable(self._fatal)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def snapshot(self) -> dict[str, Any]:
        """Queue, in-flight and per-worker numbers, consistent with one another."""
        with self._lock:
            return {
                "queued_items": sum(len(c) for c in self._queue),
                "in_flight_items": sum(s.items_in_flight for s in self.slots),
                "items_scored": self.items_done,
                "items_per_s": self._rate.rate(time.monotonic()),
                "seconds_per_item": self.item_cost.seconds_per_item,  # measured by the workers; None before
                "worker_restarts": self.restarts,
                "recycled": self.recycled,
                "output_bytes": self.output_bytes,
                "workers": {
                    s.name: {
                        "state": s.state.value,
                        "pid": s.pid,
                        "restarts": s.restarts,
                        "recycled": s.recycled,
                        "rss_mb": s.rss_mb,
                        "calls": len(s.calls),
                    }
                    for s in self.slots
                },
            }

    def take_notices(self) -> list[str]:
        """The one-off console lines (a reward's first output, the first recycle) not taken yet."""
        with self._lock:
            notices, self._notices = self._notices, []
            return notices

    # ---- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._step()
        except BaseException as exc:  # a bug here must not leave collectors waiting on nothing
            with self._changed:
                self._fatal = self._fatal or f"reward pool dispatcher failed: {type(exc).__name__}: {exc}"
                self._changed.notify_all()
            raise

    def _step(self) -> None:
        with self._lock:
            now = time.monotonic()
            self._dispatch_locked(now)
            self._health.send_pings(now)
            refs = [*self._calls, *self._health.pings]
            sleep_s = self._sleep_s_locked(now)
        outcomes: list[tuple[Any, bool, Any]] = []
        if not refs:
            self._wake.wait(sleep_s)
            self._wake.clear()
        else:
            ready, _ = ray.wait(refs, num_returns=1, timeout=sleep_s)
            if ready and len(refs) > 1:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            outcomes = _fetch(ready)
        with self._changed:
            now = time.monotonic()
            for ref, ok, value in outcomes:
                self._on_outcome_locked(ref, ok, value, now)
            self._check_deadlines_locked(now)
            self._health.check_down_workers(now)
            self._let_retired_go_locked()
            self._fatal = self._fatal or self._health.fatal
            self._dispatch_locked(now)
            self._update_gauges_locked(now)
            self._changed.notify_all()

    def _sleep_s_locked(self, now: float) -> float:
        busy = self._calls or self._health.pings or self._queue
        due = [s.head_deadline(self._cfg.chunk_timeout_s) for s in self.slots]
        due.append(self._health.next_ping_at())
        sleep = min(
            [self._cfg.poll_interval_s if busy else _IDLE_SLEEP_S] + [t - now for t in due if t is not None]
        )
        return max(sleep, 0.001)

    # ---- dispatch ---------------------------------------------------------------------------

    def _dispatch_locked(self, now: float) -> None:
        while self._queue:
            head = self._queue[0]
            slot = self._preferred_locked(head) or self._least_loaded_locked(head)
            if slot is None:
                return
            chunk = self._queue.popleft()
            ref = slot.handle.call.remote(chunk.fn, chunk.payload, chunk.lo, chunk.hi)
            call = Call(ref, chunk, started_at=None if slot.calls else now)
            slot.calls.append(call)
            self._calls[ref] = (slot, call)
            if chunk.ticket.first_dispatch_at is None:
                chunk.ticket.first_dispatch_at = now

    def _preferred_locked(self, chunk: Chunk) -> WorkerSlot | None:
        """The chunk's own worker (episodes whose state it holds) when it takes the call now."""
        if chunk.prefer is None or not self.slots:
            return None
        slot = self.slots[chunk.prefer % len(self.slots)]
        return slot if slot.takes(chunk, self._cfg.max_in_flight_per_worker) else None

    def _least_loaded_locked(self, chunk: Chunk) -> WorkerSlot | None:
        """The free worker with the least work; among equals, the next after the one that took the
        last call. Taking turns keeps every worker in use when a step's items fit one call
        (`pool.spread_min_s`), so a worker that died is met at its next turn, not never."""
        n, turn = len(self.slots), self._next_turn
        free = [
            (i, s) for i, s in enumerate(self.slots) if s.takes(chunk, self._cfg.max_in_flight_per_worker)
        ]
        if not free:
            return None
        at, slot = min(free, key=lambda f: (f[1].items_in_flight, len(f[1].calls), (f[0] - turn) % n))
        self._next_turn = (at + 1) % n
        return slot

    # ---- results and faults -----------------------------------------------------------------

    def _on_outcome_locked(self, ref: Any, ok: bool, value: Any, now: float) -> None:
        if ref in self._health.pings:
            self._health.on_ping(ref, ok, value, now)
            return
        entry = self._calls.get(ref)
        if entry is None:
            return  # a call of a worker already taken down: its chunk was queued again
        slot, call = entry
        if not ok and isinstance(value, RayActorError):
            logger.warning(
                "reward worker %s died under a call (%s); re-dispatching its work",
                slot.name,
                type(value).__name__,
            )
            self._keep_finished_calls_locked(slot, now)
            self._take_down_locked(slot, Fault.DIED, now)  # forgets every call of the slot
            return
        self._finish_call_locked(slot, call, ok, value, now)
        if slot.recycling and not slot.calls and slot.state is WorkerState.HEALTHY:
            self._recycle_locked(slot, now)

    def _keep_finished_calls_locked(self, slot: WorkerSlot, now: float) -> None:
        """A worker runs its calls in order; the news of its death can overtake the result of a
        call it finished just before. Those results are kept, so only the call it died under
        takes the fault (an innocent item alone in a call would otherwise end `error`)."""
        refs = [c.ref for c in slot.calls]
        if len(refs) < 2:
            return
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=_FINISHED_GRACE_S)[0])
        finished = {ref: (ok, value) for ref, ok, value in _fetch([r for r in refs if r in ready])}
        for call in list(slot.calls):
            ok, value = finished.get(call.ref, (False, None))
            if not ok:  # the call it died under: it and every later call take the fault's path
                return
            self._finish_call_locked(slot, call, True, value, now)

    def _finish_call_locked(self, slot: WorkerSlot, call: Call, ok: bool, value: Any, now: float) -> None:
        del self._calls[call.ref]
        slot.remove(call, now)
        n = len(call.chunk)
        if not ok:
            results: Any = Failed(n, ERROR, f"reward call failed: {type(value).__name__}: {value}"[:800])
        elif not isinstance(value, Reply) or len(value) != n:
            got = value.results if isinstance(value, Reply) else value
            bad = f"{type(got).__name__} of length {len(got) if hasattr(got, '__len__') else '?'}"
            results = Failed(n, ERROR, f"worker {slot.name} returned {bad}")
        else:
            results = value.results
            self._note_worker_locked(slot, value)
        self._deliver_locked(call.chunk, results, now)
        self._metrics.scored(slot.name, n, count_status(results, ERROR))
        self._rate.add(now, n)
        self.items_done += n

    def _deliver_locked(self, chunk: Chunk, results: Any, now: float) -> None:
        chunk.ticket.add_block(chunk.ticket_offset, results, now)

    def _note_worker_locked(self, slot: WorkerSlot, reply: Reply) -> None:
        """What the worker reported beside the results: its busy time, its memory, what the call printed."""
        if reply.busy_s is not None:
            self.item_cost.add(reply.busy_s, len(reply))
        if reply.output_bytes:
            self.output_bytes += reply.output_bytes
            if not self._said_output:
                self._said_output = True
                self._notices.append(output_notice(slot.name, reply.output, reply.output_bytes))
        if reply.worker_rss_mb is None:
            return
        slot.rss_mb = reply.worker_rss_mb
        self._metrics.worker_rss(slot.name, reply.worker_rss_mb)
        limit = self._cfg.max_worker_rss_mb
        if limit is not None and reply.worker_rss_mb > limit and slot.state is WorkerState.HEALTHY:
            slot.recycling = True  # no new calls; recycled once those it has are done

    def _recycle_locked(self, slot: WorkerSlot, now: float) -> None:
        """Replace an idle worker past pool.max_worker_rss_mb with a fresh process: nothing of it is
        in flight here, so no item is lost (another pool client's call on it is re-dispatched)."""
        rss, limit = slot.rss_mb or 0.0, self._cfg.max_worker_rss_mb
        logger.info(
            "reward worker %s: %.0f MB RSS > pool.max_worker_rss_mb=%g; recycling it", slot.name, rss, limit
        )
        self.recycled += 1
        self._metrics.recycled(slot.name)
        if not self._said_recycle:
            self._said_recycle = True
            self._notices.append(
                f"[pool] reward worker {slot.name} (pid {slot.pid}) recycled: {rss:.0f} MB RSS after a call "
                f"> pool.max_worker_rss_mb={limit:g}; its process was replaced by a fresh one, no work lost "
                "(later recycles are counted in pool.recycled, not said)"
            )
        kill_worker(slot.handle, restart=True)
        slot.recycle(now)

    def _let_retired_go_locked(self) -> None:
        """Retiring workers with no call left leave the pool."""
        for slot in [s for s in self.slots if s.retiring and not s.calls]:
            self.slots.remove(slot)
            self._health.forget(slot)
            if self._owns_workers:
                kill_worker(slot.handle, restart=False)
            logger.info("reward worker %s left the pool", slot.name)

    def _check_deadlines_locked(self, now: float) -> None:
        for slot in self.slots:
            deadline = slot.head_deadline(self._cfg.chunk_timeout_s)
            if slot.state is WorkerState.HEALTHY and deadline is not None and now >= deadline:
                # ray.cancel cannot stop a running call on a plain actor: kill it, Ray restarts it.
                logger.warning(
                    "reward worker %s: a call of %d items passed chunk_timeout_s=%gs; killing it (Ray restarts it)",
                    slot.name,
                    len(slot.calls[0].chunk),
                    self._cfg.chunk_timeout_s,
                )
                self._metrics.timed_out(slot.name)
                slot.calls[0].chunk.ticket.deadline_kills += 1
                kill_worker(slot.handle, restart=True)
                self._take_down_locked(slot, Fault.TIMEOUT, now)

    def _take_down_locked(self, slot: WorkerSlot, fault: Fault, now: float) -> None:
        """The slot's worker is gone: its running call takes the fault, the queued ones go back."""
        calls = slot.take_all()
        for call in calls:
            self._calls.pop(call.ref, None)
        slot.go_down(now)
        if not calls:
            return
        requeue: list[Chunk] = []
        outcome = after_fault(calls[0].chunk, fault, self._cfg)
        if isinstance(outcome, Failed):
            self._deliver_locked(calls[0].chunk, outcome, now)
        else:
            requeue.extend(outcome)
        requeue.extend(c.chunk for c in calls[1:])
        for chunk in requeue:
            chunk.ticket.retries += 1
        self._metrics.retried(len(requeue))
        self._queue.extendleft(reversed(requeue))  # ahead of new work: a step is waiting on them

    def _update_gauges_locked(self, now: float) -> None:
        if now < self._next_gauge_at:
            return
        self._next_gauge_at = now + _GAUGE_EVERY_S
        depth = sum(len(c) for c in self._queue) + sum(s.items_in_flight for s in self.slots)
        self._metrics.queue_depth(depth)
        self._metrics.items_per_s(self._rate.rate(now))


def _fetch(refs: list[Any]) -> list[tuple[Any, bool, Any]]:
    """(ref, ok, value or exception) for refs that ray.wait reported ready, with one ray.get."""
    if not refs:
        return []
    try:
        return [(r, True, v) for r, v in zip(refs, ray.get(refs, timeout=_FETCH_TIMEOUT_S), strict=True)]
    except Exception:  # some call failed: find which (all are ready, so these gets do not block)
        pass
    out: list[tuple[Any, bool, Any]] = []
    for ref in refs:
        try:
            out.append((ref, True, ray.get(ref, timeout=_FETCH_TIMEOUT_S)))
        except Exception as exc:
            out.append((ref, False, exc))
    return out
