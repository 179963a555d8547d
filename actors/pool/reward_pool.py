"""RewardPool: M reward worker actors behind the trainer's `RewardSource` protocol.

    pool = RewardPool.create(RewardConfig(), PoolConfig(num_workers=2), run_id="run-1")
    ticket = pool.submit(completions, targets)      # returns at once; scoring starts now
    ...                                             # sample the next micro-batch meanwhile
    rewards = pool.collect([ticket])                # trainer.grpo.reward_source.Rewards, in submission order
    pool.shutdown()

Items are cut into chunks (a small chunk travels inside the call, a large one is put once in
the object store: submission.py) and sent to the least-loaded worker with at most `max_in_flight_per_worker`
calls each; a background dispatcher (see dispatcher.py) keeps workers fed, enforces deadlines
and re-dispatches the work of dead or killed workers. Results come back as compact columns
(codec.py) and are read out in submission order; a batch past the error rate fails the run
(failure_policy.py).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import ActorAlreadyExistsError

from actors.pool.codec import EncodedResults, block_extras, component_sums, count_status, decode
from actors.pool.config import PoolConfig, item_timeout, worker_name
from actors.pool.dispatcher import Dispatcher
from actors.pool.errors import RewardCollectTimeout, RewardPoolUnavailable
from actors.pool.failure_policy import check_error_rate, failure_reasons
from actors.pool.metrics import PoolMetrics
from actors.pool.node_resources import describe_placement
from actors.pool.submission import check_items, chunk_payload
from actors.pool.work import Chunk, Ticket, plan_chunks, runs_of
from actors.pool.worker import RewardWorker, is_scorer
from actors.pool.worker_slot import WorkerSlot, WorkerState
from rewards import ERROR, TIMEOUT, USABLE_STATUSES, RewardConfig, Scorer, ScoreResult, build_scorer
from trainer.grpo.reward_source import Rewards, add_component_sums

_pool_ids = itertools.count()
# Just below Ray's inline limit for call arguments (100 KiB): larger ones Ray would put in the store.


class RewardPool:
    """Scores completions on Ray actors; implements `trainer.grpo.reward_source.RewardSource`."""

    def __init__(
        self,
        handles: Sequence[Any],
        cfg: PoolConfig,
        *,
        run_id: str,
        owns_workers: bool,
        enforce_error_rate: bool = True,
    ):
        """Wrap existing worker actor handles; prefer `create` or `attach`.

        enforce_error_rate=False: a collect past `error_rate_threshold` returns its rewards (the
        caller applies `failure_policy` itself, as the run loop does over every rank's items)."""
        self.cfg = cfg
        self.run_id = run_id
        self.enforce_error_rate = enforce_error_rate
        self.failure_reasons: list[str] = []  # up to three reasons of the last collect's failed items
        self._pool_id = next(_pool_ids)
        self._owns_workers = owns_workers
        self._restarts_reported = 0
        self._recycled_reported = 0
        self._metrics = PoolMetrics(run_id)
        now = time.monotonic()
        slots = [WorkerSlot(i, worker_name(cfg, i), h, now) for i, h in enumerate(handles)]
        self._dispatcher = Dispatcher(slots, cfg, self._metrics, owns_workers)
        self._dispatcher.start()
        self._closed = False

    # ---- assembly ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        reward: RewardConfig | Scorer | Mapping[str, Any] | None = None,
        pool: PoolConfig | Mapping[str, Any] | None = None,
        *,
        run_id: str = "default",
        worker_clock: Callable[[], float] = time.perf_counter,
    ) -> RewardPool:
        """Start `pool.num_workers` named worker actors and wait until all of them answer.

        The scorer is built here, so a user reward that cannot be resolved fails now, in this
        process, with the library's message; workers receive the built scorer (registered
        functions travel with it). `worker_clock` is what the workers time their calls by, whose
        cost per item decides how far a submission spreads (`pool.spread_min_s`).
        """
        cfg = _pool_config(pool)
        _require_ray()
        scorer = reward if is_scorer(reward) else build_scorer(reward)
        # Ray's own task retries would re-run a call on the same (restarted) actor, hanging again
        # on a poison item: retries are the dispatcher's, to any healthy worker.
        actor_cls = ray.remote(RewardWorker)
        handles: list[Any] = []
        try:
            for i in range(cfg.num_workers):
                options: dict[str, Any] = {
                    "num_cpus": cfg.cpus_per_worker,
                    "name": worker_name(cfg, i),
                    "max_restarts": cfg.max_restarts,
                    "max_task_retries": 0,
                }
                if cfg.resources:
                    options["resources"] = dict(cfg.resources)
                if cfg.label_selector:
                    options["label_selector"] = dict(cfg.label_selector)
                if cfg.namespace is not None:
                    options["namespace"] = cfg.namespace
                # Passed by value (a few kB): a restarted worker is rebuilt from its own copy.
                handles.append(
                    actor_cls.options(**options).remote(
                        scorer, cfg.concurrency_per_worker, item_timeout(cfg), clock=worker_clock
                    )
                )
        except ActorAlreadyExistsError as exc:
            _kill_all(handles)
            raise RewardPoolUnavailable(
                f"actor name {worker_name(cfg, len(handles))!r} is taken in this namespace (another pool?): "
                f"set pool.name_prefix or pool.namespace to a run-specific value ({exc})"
            ) from exc
        pool_obj = cls(handles, cfg, run_id=run_id, owns_workers=True)
        pool_obj._wait_started()
        return pool_obj

    @classmethod
    def attach(
        cls,
        pool: PoolConfig | Mapping[str, Any] | None = None,
        *,
        run_id: str = "default",
        enforce_error_rate: bool = True,
    ) -> RewardPool:
        """A pool client over workers that another process created with the same config.

        It has its own queue and deadlines; `shutdown` leaves the workers running. A deadline kill
        from one client makes the other clients' calls on that worker fail and be re-dispatched.
        """
        cfg = _pool_config(pool)
        _require_ray()
        handles = []
        for i in range(cfg.num_workers):
            try:
                handles.append(ray.get_actor(worker_name(cfg, i), namespace=cfg.namespace))
            except ValueError as exc:
                raise RewardPoolUnavailable(
                    f"no reward worker named {worker_name(cfg, i)!r} (namespace {cfg.namespace!r}): {exc}"
                ) from exc
        pool_obj = cls(handles, cfg, run_id=run_id, owns_workers=False, enforce_error_rate=enforce_error_rate)
        pool_obj._wait_started()
        return pool_obj

    def _wait_started(self) -> None:
        slots = self._dispatcher.slots

        def started() -> bool:
            return all(s.state is not WorkerState.STARTING for s in slots)

        try:
            self._dispatcher.wait_for(started, self.cfg.start_timeout_s + 1.0)
        except RewardPoolUnavailable:
            pass  # every worker is dead: reported below with each one's reason
        failed = [
            f"{s.name}: {s.dead_reason or s.state.value}" for s in slots if s.state is not WorkerState.HEALTHY
        ]
        if failed:
            self.shutdown()
            cpus = ray.cluster_resources().get("CPU", 0.0)
            raise RewardPoolUnavailable(
                f"reward workers could not start ({'; '.join(failed)}); they need "
                f"{self.cfg.num_workers} x {self.cfg.cpus_per_worker} CPUs of the cluster's {cpus}"
                f"{describe_placement(self.cfg.resources, self.cfg.label_selector)}"
            )

    # ---- RewardSource -----------------------------------------------------------------------

    def submit(
        self,
        completions: Sequence[Any],
        targets: Sequence[Any],
        group_ids: Sequence[Any] | None = None,
        *,
        fields: Sequence[Any] | None = None,
        workers: Sequence[int] | None = None,
    ) -> Ticket:
        """Queue items for scoring and return at once; scoring starts immediately.

        Items need not be str (others score as `bad_input`) but must be picklable.
        `group_ids`, one per item, are kept on the ticket (`ticket.group_ids`). `fields`, one
        mapping per item, are the data fields its user rewards take by name. `workers`, one per
        item: the worker (an index, taken modulo the pool's size) each item should go to when it
        can take work (episodes kept in a worker's process); consecutive items of one worker
        travel together.
        """
        n = check_items(completions, targets, group_ids)
        if fields is not None and len(fields) != n:
            raise ValueError(f"got {len(fields)} field rows for {n} completions: need one each")
        if workers is not None and len(workers) != n:
            raise ValueError(f"got {len(workers)} worker indices for {n} completions: need one each")
        if self._closed:
            raise RewardPoolUnavailable("the reward pool was shut down")
        ticket = Ticket(self._pool_id, n, group_ids, time.monotonic())
        chunks = []
        if workers is None:
            piece = self._dispatcher.item_cost.min_piece(self.cfg.min_chunk_size, self.cfg.spread_min_s)
            bounds = plan_chunks(n, self.cfg.chunk_size, piece, self.cfg.num_workers)
        else:
            bounds = [
                (start + a, start + b)
                for start, stop in runs_of(workers)
                for a, b in plan_chunks(stop - start, self.cfg.chunk_size, stop - start, 1)
            ]
        for start, stop in bounds:
            rows = None if fields is None else fields[start:stop]
            payload = chunk_payload(completions[start:stop], targets[start:stop], rows, start)
            prefer = None if workers is None else workers[start]
            chunks.append(Chunk(ticket, payload, offset=start, lo=0, hi=stop - start, prefer=prefer))
        self._dispatcher.enqueue(chunks)
        return ticket

    def collect(self, tickets: Sequence[Ticket], timeout_s: float | None = None) -> Rewards:
        """Every ticket's rewards, concatenated in ticket order (see `_gather` for the failures)."""
        blocks, stats = self._gather(tickets, timeout_s)
        statuses = [s for b in blocks for s in b.statuses()]
        return Rewards(
            values=[v for b in blocks for v in b.values()],
            usable=[s in USABLE_STATUSES for s in statuses],
            statuses=statuses,
            stats=stats,
            components=component_sums(blocks),
            logged=add_component_sums(b.logged for b in blocks),
            extras=block_extras(blocks),
        )

    def collect_results(
        self,
        tickets: Sequence[Ticket],
        timeout_s: float | None = None,
        *,
        enforce_error_rate: bool | None = None,
    ) -> list[ScoreResult]:
        """Every ticket's `ScoreResult`s (components and reasons included), in ticket order.
        enforce_error_rate: this collection's rule (None: the pool's), False for callers that
        count the failures themselves (episodes: the trainer's failure policy counts them)."""
        blocks, _ = self._gather(tickets, timeout_s, enforce_error_rate)
        return [r for b in blocks for r in decode(b)]

    def score(
        self,
        completions: Sequence[Any],
        targets: Sequence[Any],
        fields: Sequence[Any] | None = None,
        timeout_s: float | None = None,
    ) -> list[ScoreResult]:
        """Submit and wait: the results of one batch, in order."""
        return self.collect_results([self.submit(completions, targets, fields=fields)], timeout_s)

    def _gather(
        self, tickets: Sequence[Ticket], timeout_s: float | None, enforce_error_rate: bool | None = None
    ) -> tuple[list[EncodedResults], dict[str, float]]:
        """Wait for the tickets; raise RewardCollectTimeout, RewardPoolUnavailable, or
        RewardErrorRateExceeded when the share of `error` + `timeout` items passes the threshold."""
        tickets = list(tickets)
        for t in tickets:
            if not isinstance(t, Ticket) or t.pool_id != self._pool_id:
                raise ValueError(f"{t!r} is not a ticket of this pool")
        timeout_s = self.cfg.collect_timeout_s if timeout_s is None else timeout_s
        began = time.monotonic()
        ok = self._dispatcher.wait_for(lambda: all(t.done for t in tickets), timeout_s)
        waited = time.monotonic() - began
        self._metrics.waited(waited)
        if not ok:
            pending = sum(1 for t in tickets if not t.done)
            snap = self._dispatcher.snapshot()
            raise RewardCollectTimeout(
                f"{pending} of {len(tickets)} reward tickets not done after {timeout_s:g}s "
                f"(queued items {snap['queued_items']}, in flight {snap['in_flight_items']}, "
                f"workers {snap['workers']})"
            )
        blocks = [b for t in tickets for b in t.blocks()]
        stats = self._stats(tickets, blocks, waited)
        self.failure_reasons = (
            failure_reasons(blocks) if stats["reward_errors"] or stats["reward_timeouts"] else []
        )
        if self.enforce_error_rate if enforce_error_rate is None else enforce_error_rate:
            check_error_rate(blocks, stats, self.cfg.error_rate_threshold)
        return blocks, stats

    def _stats(self, tickets: list[Ticket], blocks: list[EncodedResults], waited: float) -> dict[str, float]:
        restarts, recycled = self._dispatcher.restarts, self._dispatcher.recycled
        new_restarts, self._restarts_reported = restarts - self._restarts_reported, restarts
        new_recycled, self._recycled_reported = recycled - self._recycled_reported, recycled
        # Additive numbers only: the trainer may sum the stats of several collections.
        return {
            "reward_items": float(sum(t.size for t in tickets)),
            "reward_errors": float(sum(count_status(b, ERROR) for b in blocks)),
            "reward_timeouts": float(sum(count_status(b, TIMEOUT) for b in blocks)),
            "reward_retries": float(sum(t.retries for t in tickets)),
            "reward_deadline_kills": float(sum(t.deadline_kills for t in tickets)),
            "worker_restarts": float(new_restarts),
            "worker_recycled": float(new_recycled),
            "reward_wait_s": waited,
        }

    # ---- inspection and shutdown ------------------------------------------------------------

    def worker_names(self) -> list[str]:
        return [s.name for s in self._dispatcher.slots]

    def worker_handles(self) -> list[Any]:
        return [s.handle for s in self._dispatcher.slots]

    def worker_pids(self) -> dict[str, int | None]:
        """Process id of each worker as of its last answer (changes when it restarts)."""
        return {name: w["pid"] for name, w in self.stats()["workers"].items()}

    def stats(self) -> dict[str, Any]:
        """Live numbers: queued and in-flight items, items scored, restarts, recycles, each worker's
        state and resident memory (MiB, after its last call through this pool)."""
        return self._dispatcher.snapshot()

    def worker_rss_mb(self) -> dict[str, tuple[int | None, float | None]]:
        """(process id, RSS MiB after its last call) of each worker, as this pool last heard."""
        return {name: (w["pid"], w["rss_mb"]) for name, w in self.stats()["workers"].items()}

    def take_notices(self) -> list[str]:
        """Console lines said once per pool and not taken yet: the first lines a reward printed on a
        worker (captured, capped), the first worker recycled past pool.max_worker_rss_mb."""
        return self._dispatcher.take_notices()

    def shutdown(self) -> None:
        """Stop dispatching and, when this pool created them, kill the worker actors."""
        if self._closed:
            return
        self._closed = True
        self._dispatcher.stop("the reward pool was shut down")
        if self._owns_workers:
            _kill_all(self.worker_handles())

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _pool_config(pool: PoolConfig | Mapping[str, Any] | None) -> PoolConfig:
    if pool is None:
        return PoolConfig()
    return pool if isinstance(pool, PoolConfig) else PoolConfig.model_validate(pool)


def _require_ray() -> None:
    if not ray.is_initialized():
        raise RewardPoolUnavailable("Ray is not initialised: call ray.init(...) before building a RewardPool")


def _kill_all(handles: Sequence[Any]) -> None:
    for handle in handles:
        try:
            ray.kill(handle, no_restart=True)
        except Exception:  # already dead
            pass
