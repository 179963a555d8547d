"""When a down worker counts as back, restarted or dead (no Ray: the pings' answers are given)."""

from __future__ import annotations

from ray.exceptions import ActorDiedError, ActorUnavailableError

from actors.pool.config import PoolConfig
from actors.pool.worker_health import WorkerHealth
from actors.pool.worker_slot import WorkerSlot, WorkerState


class _Restarts:
    def __init__(self):
        self.names: list[str] = []

    def restarted(self, worker: str) -> None:
        self.names.append(worker)


def _health(n: int = 2, **cfg) -> tuple[WorkerHealth, list[WorkerSlot], _Restarts]:
    slots = [WorkerSlot(i, f"w{i}", handle=None, now=0.0) for i in range(n)]
    metrics = _Restarts()
    return WorkerHealth(slots, PoolConfig(**cfg), metrics, owns_workers=False), slots, metrics


def _answer(health: WorkerHealth, slot: WorkerSlot, ok: bool, value, now: float) -> None:
    ref = object()
    slot.ping_ref = ref
    health.pings[ref] = slot
    health.on_ping(ref, ok, value, now)


def test_a_first_answer_makes_a_worker_healthy_and_a_new_pid_later_counts_as_a_restart():
    health, (w0, _), metrics = _health()
    _answer(health, w0, True, 100, 1.0)
    assert w0.state is WorkerState.HEALTHY and health.restarts == 0
    w0.go_down(2.0)
    _answer(health, w0, True, 101, 3.0)
    assert w0.state is WorkerState.HEALTHY and w0.pid == 101
    assert health.restarts == 1 and w0.restarts == 1 and metrics.names == ["w0"]


def test_a_recycled_process_still_answering_is_waited_for_and_its_successor_is_no_restart():
    health, (w0, _), _ = _health()
    _answer(health, w0, True, 100, 1.0)
    w0.recycle(2.0)
    _answer(health, w0, True, 100, 2.1)
    assert w0.state is WorkerState.RESTARTING and w0.next_ping_at > 2.1
    _answer(health, w0, True, 200, 2.5)
    assert w0.state is WorkerState.HEALTHY and health.restarts == 0


def test_three_died_answers_in_a_row_make_a_worker_dead_and_the_last_death_is_fatal():
    health, (w0, w1), _ = _health()
    for slot in (w0, w1):
        _answer(health, slot, True, 100 + slot.index, 1.0)
        slot.go_down(2.0)
    for t in (2.1, 2.2):
        _answer(health, w0, False, ActorDiedError(), t)
        assert w0.state is WorkerState.RESTARTING
    _answer(health, w0, False, ActorUnavailableError("restarting", None), 2.3)  # resets the count
    for t in (2.4, 2.5):
        _answer(health, w0, False, ActorDiedError(), t)
    assert w0.state is WorkerState.RESTARTING and health.fatal is None
    _answer(health, w0, False, ActorDiedError(), 2.6)
    assert w0.state is WorkerState.DEAD and "did not come back" in w0.dead_reason
    assert health.fatal is None  # w1 is still there
    for t in (2.7, 2.8, 2.9):
        _answer(health, w1, False, ActorDiedError(), t)
    assert health.fatal.startswith("all 2 reward workers are dead (w0: did not come back")


def test_a_constructor_error_while_starting_is_final_but_unavailable_is_waited_for():
    health, (w0, w1), _ = _health()
    _answer(health, w0, False, ActorUnavailableError("restarting", None), 0.5)
    assert w0.state is WorkerState.STARTING
    _answer(health, w1, False, ValueError("bad reward spec"), 0.5)
    assert w1.state is WorkerState.DEAD and "failed to start: ValueError: bad reward spec" in w1.dead_reason


def test_a_worker_down_past_its_limit_is_dead_and_its_ping_is_forgotten():
    health, (w0, w1), _ = _health(start_timeout_s=5.0, restart_timeout_s=2.0)
    _answer(health, w1, True, 7, 0.1)
    w1.go_down(1.0)
    w0.ping_ref = ref = object()
    health.pings[ref] = w0
    health.check_down_workers(2.9)
    assert w0.state is WorkerState.STARTING and w1.state is WorkerState.RESTARTING
    assert health.next_ping_at() == 1.0  # w1's: w0 has a ping in flight
    health.check_down_workers(5.1)
    assert w0.state is WorkerState.DEAD and "pool.start_timeout_s=5s" in w0.dead_reason
    assert w1.state is WorkerState.DEAD and "pool.restart_timeout_s=2s" in w1.dead_reason
    assert ref not in health.pings and health.fatal is not None
