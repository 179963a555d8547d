"""The run's control actor: the stop flag the workers check each step, and the records they publish.

The driver creates one per run (named `run-control-<run id>`, no CPU). Its signal handler sets
the stop flag; rank 0 reads it once a step and the ranks agree on it before acting. Rank 0
publishes each step's and each evaluation's record here (an asynchronous call, no wait); the
actor exports them as Ray metrics at once and the driver drains them to write the run's files
and its job-log lines. The driver therefore keeps the records even when the trainer runs on
another node, and a record reaches the files in the order rank 0 produced it.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import ray

from actors.run.metrics import RunMetrics

# Kinds of events rank 0 publishes.
START = "start"  # {"from_step": step of the checkpoint resumed from, or None}
STEP = "step"  # a metrics.jsonl row
EVAL = "eval"  # an eval.jsonl row
CHECKPOINT = "checkpoint"  # {"step": ..., "path": ...}
ERROR = "error"  # {"step": ..., "reason": ...}: the loop is about to raise
ROLLOUTS = "rollouts"  # {"step": ..., "rows": [...]}: training completions for rollouts.jsonl
EVENT_KINDS = (START, STEP, EVAL, CHECKPOINT, ERROR, ROLLOUTS)

# Ray Train's controller collects the workers' reports every 2 s by default, and a report (a
# checkpoint) waits until the previous one is collected: checkpoints closer than that, and the end
# of every run, would wait for the poll. Ray Train hands this variable from the driver to its
# controller and workers, on a joined cluster as on a local one. A poll is one small call per
# worker; at 0.2 s a checkpoint waits a tenth of a second or so, not most of a step.
TRAIN_POLL_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
TRAIN_POLL_DEFAULT_S = "0.2"


class RunControl:
    """Plain class (tested without Ray); `start_run_control` makes it an actor."""

    def __init__(self, run_id: str, export_metrics: bool = True):
        self._run_id = run_id
        self._stop_reason: str | None = None
        self._events: deque[tuple[str, dict[str, Any]]] = deque()
        self._published = 0  # events ever published
        self._written = 0  # of those, how many the driver has written to the run directory
        self._metrics = RunMetrics(run_id) if export_metrics else None
        self._roster: tuple[int, list[str] | None, dict[str, Any] | None] = (0, None, None)

    def set_roster(self, names: list[str], resize: dict[str, Any] | None) -> int:
        """The reward workers an autoscaled pool has now, and the change that made it so; the
        roster's version (the ranks follow it at their next GRPO step)."""
        self._roster = (self._roster[0] + 1, list(names), resize)
        return self._roster[0]

    def roster(self) -> tuple[int, list[str] | None, dict[str, Any] | None]:
        """(version, worker names, the resize that made it): version 0 and no names before any resize."""
        return self._roster

    def request_stop(self, reason: str) -> None:
        """Ask the workers to stop after the current step (the first reason is kept)."""
        if self._stop_reason is None:
            self._stop_reason = reason

    def stop_reason(self) -> str | None:
        return self._stop_reason

    def publish(self, kind: str, record: dict[str, Any]) -> None:
        if kind not in EVENT_KINDS:
            raise ValueError(f"event kind {kind!r} is not one of {EVENT_KINDS}")
        self._events.append((kind, record))
        self._published += 1
        if self._metrics is not None:
            if kind == STEP:
                self._metrics.record_step(record)
            elif kind == EVAL:
                self._metrics.record_eval(record)

    def mark_written(self, count: int) -> None:
        """The driver has written the first `count` events ever published."""
        self._written = max(self._written, count)

    def unwritten(self) -> int:
        """Events published but not yet written by the driver."""
        return self._published - self._written

    def drain(self) -> list[tuple[str, dict[str, Any]]]:
        """Every event published since the last drain, oldest first."""
        events = list(self._events)
        self._events.clear()
        return events


def control_actor_name(run_id: str) -> str:
    return f"run-control-{run_id}"


def start_run_control(run_id: str) -> Any:
    """The run's control actor (num_cpus=0: it must never wait for a CPU the trainers hold).

    It lives on the driver's node, as Ray Train's own controller does: a trainer or reward node
    that dies must not take the run's records and stop flag with it.
    """
    actor_cls = ray.remote(RunControl)
    here = {"ray.io/node-id": ray.get_runtime_context().get_node_id()}
    return actor_cls.options(
        name=control_actor_name(run_id), num_cpus=0, max_restarts=0, label_selector=here
    ).remote(run_id)
