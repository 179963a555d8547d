"""The driver's side of `pool.autoscale`: it reads each step record, and grows or shrinks the pool
it owns as `actors.pool.autoscale.PoolSizer` decides.

    resizer = PoolResizer(pool, control, cfg.pool.autoscale, total_steps, say=recorder.print)
    resizer.observe(row)     # every metrics.jsonl row the driver drains
    resizer.close()          # at the end of the run, before the pool shuts down

A change runs in a thread of its own, so the driver keeps writing records while workers start.
Growing starts the workers and waits until they answer before the ranks hear of them; shrinking
first takes workers off the roster the ranks follow (`RunControl.roster`) and kills them only once
a step record says the ranks follow a roster without them: no call is ever sent to a worker being
removed, so no item is lost and none is scored twice.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ray

from actors.pool.autoscale import PoolSizer, Resize
from actors.pool.config import AutoscaleConfig, PoolConfig
from actors.pool.errors import RewardPoolUnavailable
from actors.pool.worker_pool import WorkerPool
from trainer.checkpoint import list_checkpoints


class PoolResizer:
    """Applies the size rule to the pool this driver created."""

    def __init__(
        self,
        pool: WorkerPool,
        control: Any,
        cfg: AutoscaleConfig,
        total_steps: int,
        say: Callable[[str], None],
        demand: Callable[[int], None] | None = None,
    ):
        self._pool = pool
        self._control = control
        self._demand = demand  # asks the cluster for room for so many reward workers
        self._sizer = PoolSizer(cfg, workers=pool.num_workers, total_steps=total_steps)
        self._say = say
        self._roster = pool.worker_names()
        self._leaving: dict[int, list[str]] = {}  # roster version -> workers to kill once the ranks follow it
        self._lock = threading.Lock()  # over _leaving: the resize thread adds, the driver's thread takes
        self._thread: threading.Thread | None = None
        self._closing = False

    def observe(self, row: Mapping[str, Any]) -> None:
        """One drained step record: kill the workers the ranks have left, then maybe resize."""
        followed = int(row.get("pool_roster_version", 0))
        with self._lock:
            left = [self._leaving.pop(v) for v in sorted(self._leaving) if v <= followed]
        for name in (name for names in left for name in names):
            try:
                self._pool.remove_worker(name)
            except (ValueError, RewardPoolUnavailable) as exc:  # gone already, or the pool is down
                self._say(f"[pool] reward worker {name} could not be removed: {exc}")
        if self._thread is not None and self._thread.is_alive():
            return  # one change at a time; the rows until it lands are of the old size anyway
        resize = self._sizer.observe(row)
        if resize is not None:
            self._thread = threading.Thread(
                target=self._apply, args=(resize,), name="pool-resize", daemon=True
            )
            self._thread.start()

    def _apply(self, resize: Resize) -> None:
        try:
            self._change(resize)
        except Exception as exc:  # the run is ending (the pool or the control actor gone), or Ray failed
            if not self._closing:
                self._say(f"[pool] the change after step {resize.step} failed: {type(exc).__name__}: {exc}")

    def _change(self, resize: Resize) -> None:
        self._say(
            f"[pool] after step {resize.step}: {resize.workers_from} -> {resize.workers_to} reward workers: {resize.why}"
        )
        record = {"step": resize.step, "workers_from": resize.workers_from, "why": resize.why}
        if resize.workers_to > resize.workers_from:
            self._grow(resize, record)
        else:
            self._shrink(resize, record)

    def _grow(self, resize: Resize, record: dict[str, Any]) -> None:
        setup_s = None
        self._ask(resize.workers_to)  # an autoscaling cluster starts nodes while the workers wait for them
        try:
            for _ in range(resize.workers_to - resize.workers_from):
                began = time.monotonic()
                self._roster.append(self._pool.add_worker())
                setup_s = time.monotonic() - began
        except RewardPoolUnavailable as exc:  # the cluster has no room now: keep what started
            self._say(f"[pool] could not add a reward worker: {exc}")
        self._publish(record, setup_s)

    def _shrink(self, resize: Resize, record: dict[str, Any]) -> None:
        leaving = self._roster[resize.workers_to :]
        self._roster = self._roster[: resize.workers_to]
        with self._lock:  # taken before a row can say the ranks follow the new roster
            version = self._publish(record, None)
            self._leaving[version] = leaving
        self._ask(resize.workers_to)  # the nodes the leaving workers free can go

    def _publish(self, record: dict[str, Any], setup_s: float | None) -> int:
        workers = len(self._roster)
        version = ray.get(
            self._control.set_roster.remote(list(self._roster), {**record, "workers_to": workers})
        )
        self._sizer.resized(workers, setup_s)
        return version

    def _ask(self, workers: int) -> None:
        if self._demand is None:
            return
        try:
            self._demand(workers)
        except Exception as exc:  # a hint to an autoscaler: the pool goes on with the nodes there are
            self._say(f"[pool] could not ask the cluster for room: {type(exc).__name__}: {exc}")
            self._demand = None

    def close(self) -> None:
        """The run is ending: take back what it asked of the cluster. A growth still waiting for room
        ends when the pool shuts down (its new worker with it)."""
        self._closing = True
        self._ask(0)


def cluster_demand(scaling: Any, pool: PoolConfig) -> Callable[[int], None]:
    """What `PoolResizer` asks the cluster for: room for the trainer workers and `n` reward workers
    at once (`ray.autoscaler.sdk.request_resources`, honoured by KubeRay's and the cluster launcher's
    autoscaler; 0 takes the request back). A cluster without an autoscaler keeps what it has."""
    from ray.autoscaler.sdk import request_resources

    trainer = {"CPU": scaling.cpus_per_worker, **dict(scaling.resources_per_worker)}
    if scaling.use_gpu:
        trainer["GPU"] = scaling.gpus_per_worker
    worker = {"CPU": pool.cpus_per_worker, **dict(pool.resources)}

    def demand(n: int) -> None:
        if n == 0:
            request_resources(bundles=[])
            return
        bundles = [trainer] * scaling.num_workers + [worker] * n
        selectors = [dict(scaling.label_selector)] * scaling.num_workers + [dict(pool.label_selector)] * n
        request_resources(bundles=bundles, bundle_label_selectors=selectors)

    return demand


def starting_pool(cfg: PoolConfig, checkpoints: Path) -> tuple[PoolConfig, int | None]:
    """The pool a run starts with: an autoscaled pool resumed at the size its newest checkpoint
    recorded (and that step), else `cfg` as configured (and None)."""
    if cfg.autoscale is None:
        return cfg, None
    for step, path in list_checkpoints(checkpoints)[:1]:
        try:
            workers = json.loads((path / "extra.json").read_text())["pool_workers"]
        except (OSError, ValueError, KeyError, TypeError):  # written before autoscale, or unreadable
            return cfg, None
        if isinstance(workers, int) and cfg.autoscale.min_workers <= workers <= cfg.autoscale.max_workers:
            return cfg.model_copy(update={"num_workers": workers}), step
    return cfg, None
