"""Chunking, splitting and the fault policy (no Ray)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.pool.config import PoolConfig, max_runs_per_item
from actors.pool.metrics import RateWindow
from actors.pool.work import Chunk, Failed, Fault, Ticket, after_fault, count_status, plan_chunks, split
from rewards import ERROR, TIMEOUT, ScoreResult


@given(
    n=st.integers(0, 5000),
    chunk=st.integers(1, 600),
    min_chunk=st.integers(1, 600),
    spread=st.integers(1, 8),
)
def test_plan_chunks_covers_every_item_once_within_the_size(n, chunk, min_chunk, spread):
    min_chunk = min(min_chunk, chunk)
    bounds = plan_chunks(n, chunk, min_chunk, spread)
    assert [i for a, b in bounds for i in range(a, b)] == list(range(n))
    assert all(0 < b - a <= chunk for a, b in bounds)
    sizes = [b - a for a, b in bounds]
    assert not sizes or max(sizes) - min(sizes) <= 1


def test_plan_chunks_spreads_a_big_submission_over_the_workers_only():
    assert plan_chunks(4096, 4096, 64, 2) == [(0, 2048), (2048, 4096)]
    assert plan_chunks(32, 4096, 64, 2) == [(0, 32)]  # too small to be worth two calls


def _chunk(n: int) -> Chunk:
    return Chunk(Ticket(0, n, None, 0.0), fn=None, payload=None, offset=0, lo=0, hi=n)


def _runs_until_final(chunk: Chunk, poison: int, fault: Fault, cfg: PoolConfig) -> tuple[int, Failed]:
    """Feed faults to whichever piece holds `poison` until it gets its final block."""
    runs, pending = 0, [chunk]
    while True:
        piece = next(p for p in pending if p.lo <= poison < p.hi)
        runs += 1
        outcome = after_fault(piece, fault, cfg)
        if isinstance(outcome, Failed):
            return runs, outcome
        assert sorted((p.lo, p.hi) for p in outcome) == [(p.lo, p.hi) for p in outcome]
        assert outcome[0].lo == piece.lo and outcome[-1].hi == piece.hi  # nothing lost
        pending = outcome


@pytest.mark.parametrize("retries", [0, 2])
def test_a_hanging_item_is_isolated_then_times_out_after_bounded_runs(retries):
    cfg = PoolConfig(chunk_size=64, min_chunk_size=4, split_parts=4, max_retries=retries, chunk_timeout_s=3)
    runs, block = _runs_until_final(_chunk(64), 37, Fault.TIMEOUT, cfg)
    assert runs == max_runs_per_item(cfg) == 1 + 3 + retries
    assert (
        len(block) == 1
        and block.status == TIMEOUT
        and f"chunk_timeout_s=3s (ran {runs} times)" in block.reason
    )


def test_a_first_death_reruns_the_whole_chunk_then_isolates_a_crashing_item():
    cfg = PoolConfig(chunk_size=16, min_chunk_size=4, split_parts=4, max_retries=1)
    (again,) = after_fault(_chunk(16), Fault.DIED, cfg)
    assert (again.lo, again.hi, again.suspect) == (0, 16, True)
    runs, block = _runs_until_final(_chunk(16), 5, Fault.DIED, cfg)
    assert runs == 1 + 1 + 2 + 1  # whole again, 16 -> 4 -> 1, one retry alone
    assert (
        len(block) == 1 and block.status == ERROR and "died while scoring this item (5 times)" in block.reason
    )


def test_split_keeps_ticket_offsets():
    chunk = Chunk(Ticket(0, 100, None, 0.0), fn=len, payload="p", offset=50, lo=10, hi=20)
    pieces = split(chunk, 3)
    assert [(p.ticket_offset, len(p)) for p in pieces] == [(60, 3), (63, 3), (66, 4)]
    assert all(p.payload == "p" and p.fn is len and p.suspect for p in pieces)


def test_a_ticket_assembles_blocks_in_item_order():
    ticket = Ticket(0, 3, ["g", "g", "h"], 0.0)
    ticket.add_block(2, Failed(1, ERROR, "b"), 1.0)
    assert not ticket.done
    ticket.add_block(0, Failed(2, TIMEOUT, "a"), 2.0)
    assert ticket.done and ticket.done_at == 2.0 and ticket.group_ids == ("g", "g", "h")
    assert [b.reason for b in ticket.blocks()] == ["a", "b"]
    with pytest.raises(RuntimeError, match="more results than its 3 items"):
        ticket.add_block(0, Failed(1, ERROR, "x"), 3.0)


def test_statuses_are_counted_in_any_block_of_results():
    assert (
        count_status(Failed(3, TIMEOUT, "late"), TIMEOUT) == 3
        and count_status(Failed(3, TIMEOUT, "l"), ERROR) == 0
    )
    results = [ScoreResult.failed(ERROR, "x"), ScoreResult(1.0), ScoreResult.failed(ERROR, "y")]
    assert count_status(results, ERROR) == 2 and count_status(results, TIMEOUT) == 0


def test_rate_window_forgets_old_events():
    window = RateWindow(window_s=10.0)
    window.add(0.0, 50)
    window.add(5.0, 50)
    assert window.rate(5.0) == 10.0
    assert window.rate(12.0) == 5.0
