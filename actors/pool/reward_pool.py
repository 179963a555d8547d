"""RewardPool: scoring on the pool's workers, behind the trainer's `RewardSource` protocol.

    pool = RewardPool.create(RewardConfig(), PoolConfig(num_workers=2), run_id="run-1")
    ticket = pool.submit(completions, targets)      # returns at once; scoring starts now
    ...                                             # sample the next micro-batch meanwhile
    rewards = pool.collect([ticket])                # trainer.grpo.reward_source.Rewards, in submission order
    pool.shutdown()

A reward pool is one client of a `WorkerPool` (worker_pool.py): its workers keep a `ChunkScorer`
(scoring.py) and `submit` is a `call(ChunkScorer.score, items)`, spread over the workers, with the
pool's deadlines, retries and re-dispatch. Results come back as compact columns (codec.py) and
are read out in submission order; a call the pool could not complete gives its items `timeout` or
`error`, and a batch past the error rate fails the run (failure_policy.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from actors.pool.codec import EncodedResults, block_extras, component_sums, decode, failed_block
from actors.pool.config import PoolConfig, item_timeout
from actors.pool.failure_policy import check_error_rate, failure_reasons
from actors.pool.scoring import ChunkScorer, is_scorer
from actors.pool.submission import check_columns
from actors.pool.work import Failed, Ticket
from actors.pool.worker_pool import WorkerPool, pool_config
from rewards import ERROR, TIMEOUT, USABLE_STATUSES, RewardConfig, Scorer, ScoreResult, build_scorer
from trainer.grpo.reward_source import Rewards, add_component_sums


class RewardPool:
    """Scores completions on a worker pool; implements `trainer.grpo.reward_source.RewardSource`."""

    def __init__(self, workers: WorkerPool, *, enforce_error_rate: bool = True):
        """Score on `workers` (whose workers keep a `ChunkScorer`); prefer `create` or `attach`.

        enforce_error_rate=False: a collect past `error_rate_threshold` returns its rewards (the
        caller applies `failure_policy` itself, as the run loop does over every rank's items)."""
        self.workers = workers
        self.cfg = workers.cfg
        self.run_id = workers.run_id
        self.enforce_error_rate = enforce_error_rate
        self.failure_reasons: list[str] = []  # up to three reasons of the last collect's failed items
        self._restarts_reported = 0
        self._recycled_reported = 0

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
        """Start `pool.num_workers` named worker actors that score with `reward` and wait until all
        of them answer.

        The scorer is built here, so a user reward that cannot be resolved fails now, in this
        process, with the library's message; workers receive the built scorer (registered
        functions travel with it). `worker_clock` is what the workers time their calls by, whose
        cost per item decides how far a submission spreads (`pool.spread_min_s`).
        """
        cfg = pool_config(pool)
        scorer = reward if is_scorer(reward) else build_scorer(reward)
        host = ChunkScorer(scorer, cfg.concurrency_per_worker, item_timeout(cfg))
        return cls(WorkerPool.create(host, cfg, run_id=run_id, worker_clock=worker_clock))

    @classmethod
    def attach(
        cls,
        pool: PoolConfig | Mapping[str, Any] | None = None,
        *,
        run_id: str = "default",
        enforce_error_rate: bool = True,
        names: Sequence[str] | None = None,
    ) -> RewardPool:
        """A pool client over workers that another process created with the same config
        (`WorkerPool.attach`)."""
        return cls(WorkerPool.attach(pool, run_id=run_id, names=names), enforce_error_rate=enforce_error_rate)

    # ---- RewardSource -----------------------------------------------------------------------

    def submit(
        self,
        completions: Sequence[Any],
        targets: Sequence[Any],
        group_ids: Sequence[Any] | None = None,
        *,
        fields: Sequence[Any] | None = None,
    ) -> Ticket:
        """Queue items for scoring and return at once; scoring starts immediately.

        Items need not be str (others score as `bad_input`) but must be picklable.
        `group_ids`, one per item, are kept on the ticket (`ticket.group_ids`). `fields`, one
        mapping per item, are the data fields its user rewards take by name.
        """
        n = check_columns([("completions", completions), ("targets", targets)], group_ids)
        if fields is not None and len(fields) != n:
            raise ValueError(f"got {len(fields)} field rows for {n} completions: need one each")
        items = (completions, targets) if fields is None else (completions, targets, fields)
        return self.workers.call(ChunkScorer.score, items, group_ids=group_ids)

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

    def collect_results(self, tickets: Sequence[Ticket], timeout_s: float | None = None) -> list[ScoreResult]:
        """Every ticket's `ScoreResult`s (components and reasons included), in ticket order."""
        blocks, _ = self._gather(tickets, timeout_s)
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
        self, tickets: Sequence[Ticket], timeout_s: float | None
    ) -> tuple[list[EncodedResults], dict[str, float]]:
        """Wait for the tickets; raise RewardCollectTimeout, RewardPoolUnavailable, or
        RewardErrorRateExceeded when the share of `error` + `timeout` items passes the threshold."""
        tickets = list(tickets)
        found, waited = self.workers.results(tickets, timeout_s)
        blocks = [_encoded(b) for b in found]
        stats = self._stats(tickets, blocks, waited)
        self.failure_reasons = (
            failure_reasons(blocks) if stats["reward_errors"] or stats["reward_timeouts"] else []
        )
        if self.enforce_error_rate:
            check_error_rate(blocks, stats, self.cfg.error_rate_threshold)
        return blocks, stats

    def _stats(self, tickets: list[Ticket], blocks: list[EncodedResults], waited: float) -> dict[str, float]:
        restarts, recycled = self.workers.restarts, self.workers.recycled
        new_restarts, self._restarts_reported = restarts - self._restarts_reported, restarts
        new_recycled, self._recycled_reported = recycled - self._recycled_reported, recycled
        # Additive numbers only: the trainer may sum the stats of several collections.
        return {
            "reward_items": float(sum(t.size for t in tickets)),
            "reward_errors": float(sum(b.count_status(ERROR) for b in blocks)),
            "reward_timeouts": float(sum(b.count_status(TIMEOUT) for b in blocks)),
            "reward_retries": float(sum(t.retries for t in tickets)),
            "reward_deadline_kills": float(sum(t.deadline_kills for t in tickets)),
            "worker_restarts": float(new_restarts),
            "worker_recycled": float(new_recycled),
            "reward_wait_s": waited,
        }

    # ---- the workers ------------------------------------------------------------------------

    def worker_names(self) -> list[str]:
        return self.workers.worker_names()

    def worker_handles(self) -> list[Any]:
        return self.workers.worker_handles()

    def worker_pids(self) -> dict[str, int | None]:
        """Process id of each worker as of its last answer (changes when it restarts)."""
        return self.workers.worker_pids()

    def stats(self) -> dict[str, Any]:
        """The workers' live numbers (`WorkerPool.stats`)."""
        return self.workers.stats()

    def worker_rss_mb(self) -> dict[str, tuple[int | None, float | None]]:
        """(process id, RSS MiB after its last call) of each worker, as this pool last heard."""
        return self.workers.worker_rss_mb()

    def take_notices(self) -> list[str]:
        """Console lines said once per pool and not taken yet (`WorkerPool.take_notices`)."""
        return self.workers.take_notices()

    def shutdown(self) -> None:
        """Stop dispatching and, when this pool created them, kill the worker actors."""
        self.workers.shutdown()

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _encoded(block: EncodedResults | Failed) -> EncodedResults:
    """A chunk's scores; those of a call the pool could not complete, as failed results."""
    return failed_block(len(block), block.status, block.reason) if isinstance(block, Failed) else block
