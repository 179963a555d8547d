"""Which training pairs each global step uses: a pure function of the step, so a resumed run
continues at exactly the right data position and every rank agrees without communicating.

Steps are numbered 1, 2, ... across both phases: SFT steps 1..S take `sft.batch_size` pairs
each, GRPO steps S+1.. take `grpo.prompts_per_step` each, from one stream of pair indices. The
trainer hands each rank a contiguous share of a step's pairs; `StepPairs` generates only the
items a rank actually reads (games are replayed with python-chess, milliseconds each), and the
next step's share is prepared in a background thread while the current step trains.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from trainer.chess_data import Pair, pair_at
from trainer.config import TrainerConfig
from trainer.distributed import shard


def step_window(step: int, cfg: TrainerConfig) -> tuple[str, int, int]:
    """(phase, first pair index, number of pairs) of global step `step` (1-based)."""
    if step < 1:
        raise ValueError(f"steps are numbered from 1, got {step}")
    sft_steps, batch = cfg.sft.steps, cfg.sft.batch_size
    if step <= sft_steps:
        return "sft", (step - 1) * batch, batch
    grpo_step = step - sft_steps
    if grpo_step > cfg.grpo.steps:
        raise ValueError(f"step {step} is past the last step {sft_steps + cfg.grpo.steps}")
    prompts = cfg.grpo.prompts_per_step
    return "grpo", sft_steps * batch + (grpo_step - 1) * prompts, prompts


def generated_source(cfg: TrainerConfig) -> Callable[[int], Pair]:
    """Pair number i of the generated training stream (never a held-out position)."""
    d = cfg.data

    def at(index: int) -> Pair:
        return pair_at(d.seed, index, d.min_plies, d.max_plies, d.natural)

    return at


def file_source(pairs: Sequence[Pair], seed: int) -> Callable[[int], Pair]:
    """Pair number i of an endless stream over a loaded file: one seeded shuffle per epoch."""
    if not pairs:
        raise ValueError("the training data file holds no usable pairs")
    orders: dict[int, list[int]] = {}

    def at(index: int) -> Pair:
        epoch, offset = divmod(index, len(pairs))
        if epoch not in orders:
            order = list(range(len(pairs)))
            random.Random(f"epoch:{seed}:{epoch}").shuffle(order)
            orders.clear()  # one epoch at a time is enough for a forward-moving stream
            orders[epoch] = order
        return pairs[orders[epoch][offset]]

    return at


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
    """Each step's pairs for one rank, the next step's share generated in the background."""

    def __init__(self, cfg: TrainerConfig, source: Callable[[int], Pair], rank: int, world: int):
        self._cfg, self._source, self._rank, self._world = cfg, source, rank, world
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="step-data")
        self._next: tuple[int, Future[StepPairs]] | None = None

    def _build(self, step: int) -> StepPairs:
        _, first, count = step_window(step, self._cfg)
        return StepPairs(first, count, self._source).fill(self._rank, self._world)

    def pairs(self, step: int) -> StepPairs:
        """The pairs of `step` (this rank's share already generated); starts on step + 1."""
        if self._next is not None and self._next[0] == step:
            pairs = self._next[1].result()
        else:
            pairs = self._build(step)
        total = self._cfg.sft.steps + self._cfg.grpo.steps
        self._next = (step + 1, self._pool.submit(self._build, step + 1)) if step < total else None
        return pairs

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
