"""A rank's side of an autoscaled reward pool: the roster the driver publishes, followed step by step.

The driver (`service.pool_resizer`) lists the pool's workers on the run's control actor
(`RunControl.set_roster`) with a version that grows at each change. A rank attaches to the workers
of the roster it first reads, and before each GRPO step's first call takes the roster's new workers
and leaves its removed ones (`WorkerPool.follow`), so no call of a step spans a resize. The rank's
step record then names the change (on rank 0) and the version it follows, which is what tells the
driver that a removed worker is no longer called.
"""

from __future__ import annotations

from typing import Any

import ray

from actors.pool.reward_pool import RewardPool


class RosterFollower:
    """The roster version this rank follows, read from the run's control actor."""

    def __init__(self, control: Any, timeout_s: float) -> None:
        self._control = control
        self._timeout_s = timeout_s
        self.version = 0

    def _read(self) -> tuple[int, list[str], dict[str, Any] | None]:
        return ray.get(self._control.roster.remote(), timeout=self._timeout_s)

    def names(self) -> list[str]:
        """The workers to attach to first: the roster now, whose version this rank then follows."""
        self.version, names, _ = self._read()
        return names

    def follow(self, pool: RewardPool, record_change: bool) -> dict[str, Any]:
        """Take the roster's workers when it changed; the step record's fields of the change (when
        `record_change`: rank 0), else none."""
        version, names, resize = self._read()
        if version == self.version:
            return {}
        self.version = version
        pool.workers.follow(names)
        if resize is None or not record_change:
            return {}
        return {
            "pool_resized_from": float(resize["workers_from"]),
            "pool_resized_to": float(resize["workers_to"]),
            "pool_resize_step": float(resize["step"]),
            "pool_resize_why": resize["why"],
        }
