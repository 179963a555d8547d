"""Which calls a worker takes (no Ray): a suspect chunk runs alone, so its blame is certain."""

from __future__ import annotations

from actors.pool.work import Chunk, Ticket
from actors.pool.worker_slot import Call, WorkerSlot, WorkerState


def _chunk(suspect: bool = False) -> Chunk:
    return Chunk(Ticket(0, 4, None, 0.0), fn=None, payload=None, offset=0, lo=0, hi=4, suspect=suspect)


def _slot(*calls: Chunk) -> WorkerSlot:
    slot = WorkerSlot(0, "w0", handle=None, now=0.0)
    slot.state = WorkerState.HEALTHY
    slot.calls.extend(Call(ref=object(), chunk=c, started_at=0.0) for c in calls)
    return slot


def test_ordinary_chunks_queue_up_to_the_limit():
    assert _slot().takes(_chunk(), 2)
    assert _slot(_chunk()).takes(_chunk(), 2)
    assert not _slot(_chunk(), _chunk()).takes(_chunk(), 2)


def test_a_suspect_chunk_goes_only_to_an_idle_worker_and_nothing_queues_behind_it():
    assert _slot().takes(_chunk(suspect=True), 2)
    assert not _slot(_chunk()).takes(_chunk(suspect=True), 2)
    assert not _slot(_chunk(suspect=True)).takes(_chunk(), 2)
    assert not _slot(_chunk(suspect=True)).takes(_chunk(suspect=True), 8)


def test_a_worker_that_is_down_recycling_or_retiring_takes_nothing():
    for state in (WorkerState.STARTING, WorkerState.RESTARTING, WorkerState.DEAD):
        slot = _slot()
        slot.state = state
        assert not slot.takes(_chunk(), 2)
    for flag in ("recycling", "retiring"):
        slot = _slot()
        setattr(slot, flag, True)
        assert not slot.takes(_chunk(), 2)
