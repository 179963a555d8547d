"""Each step's training pairs for one rank, drawn from the task's pair stream by the schedule.

Which pair indices a step uses is `trainer.schedule.Schedule.step_window`. The trainer hands each
rank a contiguous share of a step's pairs; `StepPairs` generates only the items a rank actually
reads (a generated chess game is replayed with python-chess, milliseconds each), and the next
step's share is prepared in a background thread while the current step trains.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from trainer.data.pairs import Pair
from trainer.distributed import shard
from trainer.schedule import Schedule

REFILL_BASE = 1 << 40  # stream indices of dynamic sampling's extra prompts start here
MAX_REFILL_ROUNDS = 16  # grpo.dynamic_sampling_tries is at most this


class StepPairs(Sequence):
    """The pairs of one step as a lazy sequence: items are generated when read, then kept."""

    def __init__(self, first: int, count: int, source: Callable[[int], Pair]):
        self._first, self._count, self._source = first, count, source
        self._items: dict[int, Pair] = {}

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        if not -self._count <= i < self._count:
            raise IndexError(f"pair {i} of a step of {self._count}")
        i %= self._count
        if i not in self._items:
            self._items[i] = self._source(self._first + i)
        return self._items[i]

    def fill(self, rank: int, world: int) -> StepPairs:
        """Generate this rank's share now (the items the trainer will read)."""
        shard(self, rank, world)
        return self


class StepData:
    """Each step's pairs for one rank, the next step's share generated in the background.

    SFT steps draw from `source`, GRPO steps (and dynamic sampling's extra prompts) from
    `grpo_source` (default: `source`): the same prompts and fields at every index, without what only
    SFT reads (`service.tasks.base.Task.grpo_stream`)."""

    def __init__(
        self,
        schedule: Schedule,
        source: Callable[[int], Pair],
        rank: int,
        world: int,
        grpo_source: Callable[[int], Pair] | None = None,
    ):
        self._schedule, self._source, self._rank, self._world = schedule, source, rank, world
        self._grpo_source = grpo_source or source
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="step-data")
        self._next: tuple[int, Future[StepPairs]] | None = None

    def _build(self, step: int) -> StepPairs:
        phase, first, count = self._schedule.step_window(step)
        source = self._source if phase == "sft" else self._grpo_source
        return StepPairs(first, count, source).fill(self._rank, self._world)

    def pairs(self, step: int) -> StepPairs:
        """The pairs of `step` (this rank's share already generated); starts on step + 1."""
        if self._next is not None and self._next[0] == step:
            pairs = self._next[1].result()
        else:
            pairs = self._build(step)
        more = step < self._schedule.total
        self._next = (step + 1, self._pool.submit(self._build, step + 1)) if more else None
        return pairs

    def ahead(self, step: int) -> StepPairs:
        """The pairs of a later `step` (this rank's share generated), for sampling it ahead; the
        background preparation of the next step is left as it is (and used when it is that step)."""
        if self._next is not None and self._next[0] == step:
            return self._next[1].result()
        return self._build(step)

    def refill(self, step: int, attempt: int) -> StepPairs:
        """Round `attempt` of dynamic sampling's extra prompts for `step` (this rank's share generated):
        as many as the step has, from a region of the stream that the schedule never reaches, so a
        resumed run draws the same ones."""
        _, _, count = self._schedule.step_window(step)
        first = REFILL_BASE + (step * MAX_REFILL_ROUNDS + attempt) * count
        return StepPairs(first, count, self._grpo_source).fill(self._rank, self._world)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
