"""The pool's units of work and its fault policy, free of Ray so they are tested directly.

A `Ticket` is one `call(fn, items)`: its items are cut into `Chunk`s (slices of a payload: the
items' columns, by value or in the object store), each run by `fn` on a worker. A chunk's results
come back as a block: what `fn` returned (one result per item), or `Failed` when the pool could
not complete its call. `after_fault` decides what a chunk that timed out or lost its worker
becomes: the same chunk again, smaller pieces (to isolate a poison item), or `Failed` with
`timeout` / `error`. Each client reads the blocks of its own calls (scores, episode steps).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from actors.pool.config import PoolConfig
from rewards.result import ERROR, TIMEOUT

_ticket_ids = itertools.count()


class Fault(enum.Enum):
    TIMEOUT = "timeout"  # the call passed its deadline; its worker was killed
    DIED = "died"  # the worker process died while the call ran


@dataclass(frozen=True)
class Failed:
    """The results of `n` items whose call the pool could not complete: each has `status`
    (`timeout`: it passed its deadline; `error`: its worker kept dying, or the call failed) and
    `reason`. A client turns them into results of its own kind."""

    n: int
    status: str
    reason: str

    def __len__(self) -> int:
        return self.n

    def count_status(self, status: str) -> int:
        return self.n if status == self.status else 0


def count_status(results: Any, status: str) -> int:
    """Items of a call's results with `status`: a block that counts its own (`count_status`: the
    scores' columns, `Failed`), else a sequence of results that each carry `.status`."""
    own = getattr(results, "count_status", None)
    if callable(own):
        return own(status)
    return sum(1 for r in results if getattr(r, "status", None) == status)


class Ticket:
    """One call over a list of items: their results arrive in blocks and are read back in order."""

    def __init__(self, pool_id: int, size: int, group_ids: Sequence[Any] | None, now: float):
        self.ticket_id = next(_ticket_ids)
        self.pool_id = pool_id
        self.size = size
        self.group_ids = tuple(group_ids) if group_ids is not None else None
        self.submitted_at = now
        self.first_dispatch_at: float | None = None
        self.done_at: float | None = now if size == 0 else None
        self.retries = 0  # chunk dispatches caused by faults
        self.deadline_kills = 0  # calls of this ticket killed at their deadline
        self._blocks: list[tuple[int, Any]] = []
        self._remaining = size

    @property
    def done(self) -> bool:
        return self._remaining == 0

    def add_block(self, offset: int, block: Any, now: float) -> None:
        """Results of items [offset, offset + len(block)) of this ticket."""
        self._blocks.append((offset, block))
        self._remaining -= len(block)
        if self._remaining < 0:
            raise RuntimeError(f"ticket {self.ticket_id} got more results than its {self.size} items")
        if self._remaining == 0:
            self.done_at = now

    def blocks(self) -> list[Any]:
        """All result blocks in item order (only meaningful once done): what the calls' function
        returned, or `Failed`."""
        return [b for _, b in sorted(self._blocks, key=lambda ob: ob[0])]

    def __repr__(self) -> str:
        return f"Ticket(id={self.ticket_id}, size={self.size}, done={self.done})"


@dataclass(eq=False)
class Chunk:
    """Items [lo, hi) of a payload that starts at `offset` in its ticket, run by `fn` on a worker."""

    ticket: Ticket
    fn: Any  # what the worker runs on them (`RewardWorker.call`)
    payload: Any  # the items' columns, or a ray.ObjectRef of them; opaque here
    offset: int
    lo: int
    hi: int
    suspect: bool = False  # already failed once: a further fault splits it at once
    alone_faults: int = 0  # faults suffered as a single item
    history: list[str] = field(default_factory=list)  # faults so far, for the final reason
    prefer: int | None = (
        None  # the worker (its place among the pool's, modulo their number) it goes to when free
    )

    def __len__(self) -> int:
        return self.hi - self.lo

    @property
    def ticket_offset(self) -> int:
        return self.offset + self.lo


def plan_chunks(n: int, chunk_size: int, min_chunk_size: int, spread: int) -> list[tuple[int, int]]:
    """Even [start, stop) bounds covering n items: at most chunk_size each, and at least `spread`
    pieces (one per worker) when every piece can still hold min_chunk_size items."""
    if n <= 0:
        return []
    count = -(-n // chunk_size)
    count = max(count, min(spread, n // min_chunk_size), 1)
    return [(i * n // count, (i + 1) * n // count) for i in range(count)]


def runs_of(keys: Sequence[Any]) -> list[tuple[int, int]]:
    """[start, stop) bounds of the runs of equal consecutive keys."""
    bounds, start = [], 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            bounds.append((start, i))
            start = i
    return bounds


def split(chunk: Chunk, parts: int) -> list[Chunk]:
    """`chunk` cut into up to `parts` even, suspect pieces."""
    bounds = plan_chunks(len(chunk), -(-len(chunk) // parts), 1, 1)
    return [
        replace(
            chunk, lo=chunk.lo + a, hi=chunk.lo + b, suspect=True, alone_faults=0, history=list(chunk.history)
        )
        for a, b in bounds
    ]


def after_fault(chunk: Chunk, fault: Fault, cfg: PoolConfig) -> list[Chunk] | Failed:
    """What to do with a chunk whose call failed: chunks to queue again, or its final results.

    - A worker that died under a chunk for the first time is blamed on the worker (kill -9, OOM):
      the same chunk runs again on a healthy worker, so its results do not change.
    - A timeout, or a second death, is blamed on the items: the chunk is split so that the
      innocent items score normally and the poison one ends up alone.
    - A single item is run again up to `max_retries` times, then gets status `timeout` (it hung)
      or `error` (its worker died under it), with a reason.
    """
    history = [*chunk.history, fault.value]
    if len(chunk) > 1:
        if fault is Fault.DIED and not chunk.suspect:
            return [replace(chunk, suspect=True, history=history)]
        return split(replace(chunk, history=history), cfg.split_parts)
    if chunk.alone_faults < cfg.max_retries:
        return [replace(chunk, suspect=True, alone_faults=chunk.alone_faults + 1, history=history)]
    runs = len(history)
    if fault is Fault.TIMEOUT:
        reason = f"scoring did not finish within chunk_timeout_s={cfg.chunk_timeout_s:g}s (ran {runs} times)"
        return Failed(1, TIMEOUT, reason)
    reason = f"the reward worker process died while scoring this item ({history.count('died')} times)"
    return Failed(1, ERROR, reason)
