"""The size rule of an autoscaled pool (`pool.autoscale`): from each GRPO step's record, whether the
pool grows or shrinks before the next steps, to how many workers and why.

    sizer = PoolSizer(cfg.autoscale, workers=cfg.num_workers, total_steps=...)
    resize = sizer.observe(row)        # a metrics.jsonl row; a Resize or None
    sizer.resized(resize.workers_to)   # once the pool has that many workers

A step's wait share is the time it waited for rewards over its time (`reward_wait_s / step_time_s`).
Only steps run at the pool's current size count (`pool_workers`: a resize reaches the ranks at
their next step). Above `target_wait_share` for `cooldown_steps` such steps in a row, the pool
grows; below half of it for as long, with workers to spare, it shrinks. How far comes from what the
step measured, not one worker at a time:

    work  = pool_seconds_per_item x scorer_reward_items    CPU seconds of scoring a step needs
    other = step_time_s - reward_wait_s                     what the step does besides waiting
    fits  = other x target / (1 - target)                   the wait that keeps the share at target
    hidden = work / workers - reward_wait_s                 scoring already hidden behind sampling
    wanted = ceil(work / (fits + hidden))                   workers for which work / n - hidden <= fits

clamped to `min_workers..max_workers`, at least one more (growing) or fewer (shrinking). Before
the workers have measured a cost per item the pool doubles (growing) or sheds one (shrinking).
A worker's start-up (`setup_s`, measured on the last one added) counts against growing: the pool
grows only when the wait it saves over the steps left outweighs it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from actors.pool.config import AutoscaleConfig


@dataclass(frozen=True)
class Resize:
    """One change of the pool's size, as the run records it."""

    step: int  # the GRPO step whose record decided it
    workers_from: int
    workers_to: int
    why: str


@dataclass(frozen=True)
class StepLoad:
    """What one GRPO step's record says of the pool's load."""

    step: int
    workers: int  # the pool's size the step ran with
    wait_s: float
    step_s: float
    items: float
    seconds_per_item: float | None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> StepLoad | None:
        """The load of a GRPO row that ran on the pool; None for any other row."""
        if row.get("phase") != "grpo" or "pool_workers" not in row or not row.get("step_time_s"):
            return None
        cost = row.get("pool_seconds_per_item")
        return cls(
            step=int(row["step"]),
            workers=int(row["pool_workers"]),
            wait_s=float(row.get("reward_wait_s", 0.0)),
            step_s=float(row["step_time_s"]),
            items=float(row.get("scorer_reward_items", 0.0)),
            seconds_per_item=None if cost is None else float(cost),
        )

    @property
    def wait_share(self) -> float:
        return self.wait_s / self.step_s

    def wanted(self, target: float) -> int | None:
        """Workers that would bring the wait share to `target` (None before a measured cost)."""
        if self.seconds_per_item is None or self.items <= 0:
            return None
        work = self.seconds_per_item * self.items
        fits = max(self.step_s - self.wait_s, 0.0) * target / (1.0 - target)
        hidden = max(work / self.workers - self.wait_s, 0.0)
        if fits + hidden <= 0.0:
            return None
        return max(1, math.ceil(work / (fits + hidden)))


class PoolSizer:
    """Decides the pool's size step by step (pure: the driver applies what it decides)."""

    def __init__(self, cfg: AutoscaleConfig, workers: int, total_steps: int):
        self.cfg = cfg
        self.workers = workers
        self.total_steps = total_steps
        self.setup_s = 0.0  # a worker's measured start-up, once one was added
        self._above = self._below = 0  # steps in a row at the current size above / below the band

    def resized(self, workers: int, setup_s: float | None = None) -> None:
        """The pool now has `workers` workers; `setup_s`: what starting one of them took."""
        self.workers = workers
        if setup_s is not None:
            self.setup_s = setup_s
        self._above = self._below = 0

    def observe(self, row: Mapping[str, Any]) -> Resize | None:
        """The change a step's record calls for, if any (rows of other sizes are not counted)."""
        load = StepLoad.of(row)
        if load is None or load.workers != self.workers:
            return None
        target = self.cfg.target_wait_share
        share = load.wait_share
        self._above = self._above + 1 if share > target else 0
        self._below = self._below + 1 if share < target / 2 else 0
        if self._above >= self.cfg.cooldown_steps and self.workers < self.cfg.max_workers:
            return self._grow(load, share)
        if self._below >= self.cfg.cooldown_steps and self.workers > self.cfg.min_workers:
            return self._shrink(load, share)
        return None

    def _grow(self, load: StepLoad, share: float) -> Resize | None:
        wanted = load.wanted(self.cfg.target_wait_share)
        to = min(self.cfg.max_workers, max(self.workers + 1, wanted or 2 * self.workers))
        saved_s = load.wait_s * (1.0 - self.workers / to) * max(self.total_steps - load.step, 0)
        if saved_s <= self.setup_s * (to - self.workers):
            self._above = 0
            return None  # starting the workers would cost more than the steps left would wait
        how = f"{wanted} wanted by the measured cost" if wanted else "no cost measured yet: doubled"
        return self._resize(load, to, f"wait share {share:.2f} above {self.cfg.target_wait_share:g} ({how})")

    def _shrink(self, load: StepLoad, share: float) -> Resize | None:
        wanted = load.wanted(self.cfg.target_wait_share)
        if wanted is not None and wanted >= self.workers:
            self._below = 0
            return None  # every worker is needed for the work measured
        to = max(self.cfg.min_workers, min(self.workers - 1, wanted or self.workers - 1))
        how = f"{wanted} wanted by the measured cost" if wanted else "no cost measured yet: one less"
        return self._resize(
            load, to, f"wait share {share:.2f} below {self.cfg.target_wait_share / 2:g} ({how})"
        )

    def _resize(self, load: StepLoad, to: int, why: str) -> Resize:
        self._above = self._below = 0
        return Resize(load.step, self.workers, to, why)
