"""WorkerPool: M worker actors that run `call(fn, items)` with deadlines, kill-and-replace, statuses
and recycling. Scoring (`RewardPool`) and environment episodes (`PoolEpisodes`) are its clients.

    pool = WorkerPool.create(host, PoolConfig(num_workers=2), run_id="run-1")
    ticket = pool.call(Host.method, (column_a, column_b))   # returns at once; the calls start now
    blocks = pool.results([ticket])                         # each chunk's results, in item order
    pool.shutdown()

Each worker keeps `host` in its process (passed by value: a restarted worker is rebuilt from its own
copy) and runs `fn(host, *columns)` over a chunk of the items. Items are cut into chunks (a small
chunk travels inside the call, a large one is put once in the object store: submission.py) and sent
to the least-loaded worker, or to the worker each item asks for (an episode's state stays in one
process); a background dispatcher (dispatcher.py) keeps workers fed, enforces each call's deadline
(`pool.chunk_timeout_s`), kills and replaces a stuck or dead worker and runs its calls again
elsewhere. A chunk's results come back as `fn` returned them, or as `work.Failed` (`timeout`,
`error`) when the pool could not complete its call. Workers join and leave between calls
(`add_worker`, `remove_worker`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import ActorAlreadyExistsError

from actors.pool.config import PoolConfig, worker_name
from actors.pool.dispatcher import Dispatcher
from actors.pool.errors import RewardCollectTimeout, RewardPoolUnavailable
from actors.pool.metrics import PoolMetrics
from actors.pool.node_resources import describe_placement
from actors.pool.submission import chunk_payload
from actors.pool.work import Chunk, Ticket, plan_chunks, runs_of
from actors.pool.worker import RewardWorker
from actors.pool.worker_slot import WorkerSlot, WorkerState

_pool_ids = itertools.count()


class WorkerPool:
    """Runs functions over chunks of items on Ray worker actors."""

    def __init__(
        self,
        handles: Sequence[Any],
        cfg: PoolConfig,
        *,
        run_id: str,
        owns_workers: bool,
        names: Sequence[str] | None = None,
    ):
        """Wrap existing worker actor handles (named `names`, default the first ones of the config);
        prefer `create` or `attach`."""
        self.cfg = cfg
        self.run_id = run_id
        self.pool_id = next(_pool_ids)
        self._owns_workers = owns_workers
        self._host: Any = None  # what `create` built the workers with (`add_worker` builds more)
        self._worker_clock: Callable[[], float] = time.perf_counter
        self.metrics = PoolMetrics(run_id)
        now = time.monotonic()
        names = list(names) if names else [worker_name(cfg, i) for i in range(len(handles))]
        slots = [WorkerSlot(i, name, h, now) for i, (name, h) in enumerate(zip(names, handles, strict=True))]
        self._dispatcher = Dispatcher(slots, cfg, self.metrics, owns_workers)
        self._dispatcher.start()
        self._closed = False

    # ---- assembly ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        host: Any,
        pool: PoolConfig | Mapping[str, Any] | None = None,
        *,
        run_id: str = "default",
        worker_clock: Callable[[], float] = time.perf_counter,
    ) -> WorkerPool:
        """Start `pool.num_workers` named worker actors, each keeping `host`, and wait until all of
        them answer. `worker_clock` is what the workers time their calls by (`RewardWorker`)."""
        cfg = pool_config(pool)
        _require_ray()
        handles: list[Any] = []
        try:
            for i in range(cfg.num_workers):
                handles.append(_start_worker(cfg, i, host, worker_clock))
        except ActorAlreadyExistsError as exc:
            kill_all(handles)
            raise _name_taken(cfg, len(handles), exc) from exc
        pool_obj = cls(handles, cfg, run_id=run_id, owns_workers=True)
        pool_obj._host, pool_obj._worker_clock = host, worker_clock
        pool_obj._wait_started()
        return pool_obj

    @classmethod
    def attach(
        cls,
        pool: PoolConfig | Mapping[str, Any] | None = None,
        *,
        run_id: str = "default",
        names: Sequence[str] | None = None,
    ) -> WorkerPool:
        """A pool client over workers that another process created with the same config: the
        first `num_workers` of them, or those `names` lists (an autoscaled pool's roster).

        It has its own queue and deadlines; `shutdown` leaves the workers running. A deadline kill
        from one client makes the other clients' calls on that worker fail and be re-dispatched.
        """
        cfg = pool_config(pool)
        _require_ray()
        names = list(names) if names else [worker_name(cfg, i) for i in range(cfg.num_workers)]
        handles = [_named_worker(cfg, name) for name in names]
        pool_obj = cls(handles, cfg, run_id=run_id, owns_workers=False, names=names)
        pool_obj._wait_started()
        return pool_obj

    def _wait_started(self) -> None:
        """Wait until every worker answers; shut down and say why when one cannot."""
        problem = self._start_problem(self._dispatcher.slots)
        if problem:
            self.shutdown()
            raise RewardPoolUnavailable(problem)

    def _start_problem(self, slots: Sequence[WorkerSlot]) -> str | None:
        """Wait until `slots` answer; None when they all did, else why they did not."""
        slots = list(slots)

        def started() -> bool:
            return all(s.state is not WorkerState.STARTING for s in slots)

        try:
            self._dispatcher.wait_for(started, self.cfg.start_timeout_s + 1.0)
        except RewardPoolUnavailable:
            pass  # every worker is dead: reported below with each one's reason
        failed = [
            f"{s.name}: {s.dead_reason or s.state.value}" for s in slots if s.state is not WorkerState.HEALTHY
        ]
        if not failed:
            return None
        cpus = ray.cluster_resources().get("CPU", 0.0)
        return (
            f"reward workers could not start ({'; '.join(failed)}); they need "
            f"{len(slots)} x {self.cfg.cpus_per_worker} CPUs of the cluster's {cpus}"
            f"{describe_placement(self.cfg.resources, self.cfg.label_selector)}"
        )

    def add_worker(self) -> str:
        """Start one more worker (keeping the host the pool was created with); its name, once it
        answers. Only a pool that created its workers grows."""
        if not self._owns_workers:
            raise RewardPoolUnavailable("a pool attached to another process's workers cannot add one")
        if self._closed:
            raise RewardPoolUnavailable("the reward pool was shut down")
        index = max((s.index for s in self._dispatcher.slots), default=-1) + 1
        try:
            handle = _start_worker(self.cfg, index, self._host, self._worker_clock)
        except ActorAlreadyExistsError as exc:
            raise _name_taken(self.cfg, index, exc) from exc
        slot = WorkerSlot(index, worker_name(self.cfg, index), handle, time.monotonic())
        self._dispatcher.add(slot)
        problem = self._start_problem([slot])
        if problem:
            self._dispatcher.retire(slot.name)
            raise RewardPoolUnavailable(problem)
        return slot.name

    def remove_worker(self, name: str | None = None) -> str:
        """Drain one worker (`name`, or the last one): it takes no new calls and leaves once those
        it has are done (killed, when this pool created it). Its name."""
        if name is None:
            name = self._dispatcher.slots[-1].name
        self._dispatcher.retire(name)
        return name

    def follow(self, names: Sequence[str]) -> None:
        """Take the workers `names` lists now (the owner's roster, `pool.autoscale`): attach the ones
        this pool lacks, then retire the ones not listed (they finish what they hold). Between calls."""
        current = {s.name for s in self._dispatcher.slots if not s.retiring}
        index = max((s.index for s in self._dispatcher.slots), default=-1)
        added = []
        for name in [n for n in names if n not in current]:
            index += 1
            added.append(WorkerSlot(index, name, _named_worker(self.cfg, name), time.monotonic()))
            self._dispatcher.add(added[-1])
        if added and (problem := self._start_problem(added)):
            raise RewardPoolUnavailable(problem)
        for name in sorted(current - set(names)):
            self._dispatcher.retire(name)

    # ---- calls ------------------------------------------------------------------------------

    @property
    def num_workers(self) -> int:
        """Workers of the pool now (calls that name a worker take it modulo this)."""
        return len(self._dispatcher.slots)

    def call(
        self,
        fn: Callable[..., Any],
        items: Sequence[Sequence[Any]],
        *,
        group_ids: Sequence[Any] | None = None,
        workers: Sequence[int] | None = None,
    ) -> Ticket:
        """Queue `fn(host, *columns)` over the items (`items`: their columns, one entry per item
        each, checked by the caller) and return at once; the calls start immediately.

        `group_ids`, one per item, are kept on the ticket. `workers`, one per item: the worker (an
        index, taken modulo the pool's size) each item should go to when it can take work;
        consecutive items of one worker travel together. Without them, a call is spread over the
        workers in pieces worth a call (`pool.spread_min_s`, `pool.min_chunk_size`)."""
        if self._closed:
            raise RewardPoolUnavailable("the reward pool was shut down")
        sizes = sorted({len(column) for column in items})
        if len(sizes) > 1:
            raise ValueError(
                f"the columns of a call's items need one entry per item each, got lengths {sizes}"
            )
        n = sizes[0] if sizes else 0
        ticket = Ticket(self.pool_id, n, group_ids, time.monotonic())
        if workers is None:
            piece = self._dispatcher.item_cost.min_piece(self.cfg.min_chunk_size, self.cfg.spread_min_s)
            bounds = plan_chunks(n, self.cfg.chunk_size, piece, self.num_workers)
        else:
            bounds = [
                (start + a, start + b)
                for start, stop in runs_of(workers)
                for a, b in plan_chunks(stop - start, self.cfg.chunk_size, stop - start, 1)
            ]
        chunks = []
        for start, stop in bounds:
            payload = chunk_payload([column[start:stop] for column in items], start)
            prefer = None if workers is None else workers[start]
            chunks.append(Chunk(ticket, fn, payload, offset=start, lo=0, hi=stop - start, prefer=prefer))
        self._dispatcher.enqueue(chunks)
        return ticket

    def results(self, tickets: Sequence[Ticket], timeout_s: float | None = None) -> tuple[list[Any], float]:
        """Every ticket's result blocks, in ticket and item order, and the seconds waited for them;
        RewardCollectTimeout past `timeout_s` (default `pool.collect_timeout_s`), RewardPoolUnavailable
        when no worker is left."""
        tickets = list(tickets)
        for t in tickets:
            if not isinstance(t, Ticket) or t.pool_id != self.pool_id:
                raise ValueError(f"{t!r} is not a ticket of this pool")
        timeout_s = self.cfg.collect_timeout_s if timeout_s is None else timeout_s
        began = time.monotonic()
        ok = self._dispatcher.wait_for(lambda: all(t.done for t in tickets), timeout_s)
        waited = time.monotonic() - began
        self.metrics.waited(waited)
        if not ok:
            pending = sum(1 for t in tickets if not t.done)
            snap = self._dispatcher.snapshot()
            raise RewardCollectTimeout(
                f"{pending} of {len(tickets)} reward tickets not done after {timeout_s:g}s "
                f"(queued items {snap['queued_items']}, in flight {snap['in_flight_items']}, "
                f"workers {snap['workers']})"
            )
        return [b for t in tickets for b in t.blocks()], waited

    @property
    def restarts(self) -> int:
        """Worker restarts seen since the pool started."""
        return self._dispatcher.restarts

    @property
    def recycled(self) -> int:
        """Workers replaced past pool.max_worker_rss_mb since the pool started."""
        return self._dispatcher.recycled

    # ---- inspection and shutdown ------------------------------------------------------------

    def worker_names(self) -> list[str]:
        return [s.name for s in self._dispatcher.slots]

    def worker_handles(self) -> list[Any]:
        return [s.handle for s in self._dispatcher.slots]

    def worker_pids(self) -> dict[str, int | None]:
        """Process id of each worker as of its last answer (changes when it restarts)."""
        return {name: w["pid"] for name, w in self.stats()["workers"].items()}

    def stats(self) -> dict[str, Any]:
        """Live numbers: queued and in-flight items, items run, restarts, recycles, each worker's
        state and resident memory (MiB, after its last call through this pool)."""
        return self._dispatcher.snapshot()

    def worker_rss_mb(self) -> dict[str, tuple[int | None, float | None]]:
        """(process id, RSS MiB after its last call) of each worker, as this pool last heard."""
        return {name: (w["pid"], w["rss_mb"]) for name, w in self.stats()["workers"].items()}

    def take_notices(self) -> list[str]:
        """Console lines said once per pool and not taken yet: the first lines a call printed on a
        worker (captured, capped), the first worker recycled past pool.max_worker_rss_mb."""
        return self._dispatcher.take_notices()

    def shutdown(self) -> None:
        """Stop dispatching and, when this pool created them, kill the worker actors."""
        if self._closed:
            return
        self._closed = True
        self._dispatcher.stop("the reward pool was shut down")
        if self._owns_workers:
            kill_all(self.worker_handles())

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def pool_config(pool: PoolConfig | Mapping[str, Any] | None) -> PoolConfig:
    if pool is None:
        return PoolConfig()
    return pool if isinstance(pool, PoolConfig) else PoolConfig.model_validate(pool)


def _require_ray() -> None:
    if not ray.is_initialized():
        raise RewardPoolUnavailable("Ray is not initialised: call ray.init(...) before building a pool")


def _start_worker(cfg: PoolConfig, index: int, host: Any, clock: Callable[[], float]) -> Any:
    """A named worker actor keeping `host`."""
    # Ray's own task retries would re-run a call on the same (restarted) actor, hanging again on a
    # poison item: retries are the dispatcher's, to any healthy worker.
    options: dict[str, Any] = {
        "num_cpus": cfg.cpus_per_worker,
        "name": worker_name(cfg, index),
        "max_restarts": cfg.max_restarts,
        "max_task_retries": 0,
    }
    if cfg.resources:
        options["resources"] = dict(cfg.resources)
    if cfg.label_selector:
        options["label_selector"] = dict(cfg.label_selector)
    if cfg.namespace is not None:
        options["namespace"] = cfg.namespace
    # The host travels by value (a few kB): a restarted worker is rebuilt from its own copy.
    return ray.remote(RewardWorker).options(**options).remote(host, clock=clock)


def _named_worker(cfg: PoolConfig, name: str) -> Any:
    """The handle of the live worker actor `name` in the pool's namespace."""
    try:
        return ray.get_actor(name, namespace=cfg.namespace)
    except ValueError as exc:
        raise RewardPoolUnavailable(
            f"no reward worker named {name!r} (namespace {cfg.namespace!r}): {exc}"
        ) from exc


def _name_taken(cfg: PoolConfig, index: int, exc: Exception) -> RewardPoolUnavailable:
    return RewardPoolUnavailable(
        f"actor name {worker_name(cfg, index)!r} is taken in this namespace (another pool?): "
        f"set pool.name_prefix or pool.namespace to a run-specific value ({exc})"
    )


def kill_all(handles: Sequence[Any]) -> None:
    for handle in handles:
        try:
            ray.kill(handle, no_restart=True)
        except Exception:  # already dead
            pass
