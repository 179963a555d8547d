"""Episodes played on the pool's workers: the sampler's episode host when environments run there.

The workers keep a `rewards.env.remote.EpisodeServer`, and each episode's calls are calls of their
own kind on the pool (`WorkerPool.call` of `EpisodeServer.start`, `.step`, `.close`), each giving
back an `EpisodeStep`. Each episode is given a worker (sample i of a batch: worker i mod the pool's
size) and every call of it is sent there, so its state stays in that worker's process; the
episodes of a batch that ended a turn at the same decoding step go out together, one call per
worker, and are stepped side by side. The pool treats these calls like any other: a call past its
deadline kills and replaces its worker and the episode ends `timeout`; a worker that dies is
replaced and the call runs again on a healthy worker, which rebuilds the episode by replaying its
recorded actions. Here each episode is mirrored by an `EpisodeRecord`, so the results read as the
in-process host's (`rewards.env.host.LocalEpisodes`).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from actors.pool.work import Failed
from actors.pool.worker_pool import WorkerPool
from rewards.env.calls import (
    EpisodeCall,
    EpisodeStep,
    check_first_observation,
    failed_call,
    keep_episode_info,
    record_step,
)
from rewards.env.episode import FAILED_EPISODE_STATUSES, EpisodeRecord, EpisodeResult, failure_reasons
from rewards.env.remote import EpisodeServer


class PoolEpisodes:
    """The episodes of one sampling batch, played on the pool's workers."""

    def __init__(
        self,
        pool_of: Callable[[], WorkerPool],
        *,
        max_turns: int,
        reward_mode: str = "sum",
        aggregate_metrics: Callable[[list[dict[str, Any]]], Any] | None = None,
        failure_share: float | None = None,
    ):
        """failure_share: as `rewards.env.host.LocalEpisodes`'s."""
        self._pool_of = pool_of  # attached on first use
        self.failure_share, self.failure_share_key = failure_share, "pool.error_rate_threshold"
        self.max_turns, self.reward_mode = max_turns, reward_mode
        self.aggregate_metrics = aggregate_metrics  # the environment's own (None: the trainer's mean)
        self._prefix = uuid.uuid4().hex[:12]  # episode ids unique across ranks and runs
        self._ids = itertools.count()
        self._records: list[EpisodeRecord] = []
        self._keys: list[str] = []
        self._rows: list[Mapping[str, Any]] = []
        self._open: set[int] = set()  # episodes a worker may still hold
        self.failure_reasons: list[str] = []

    def start(self, rows: Sequence[Mapping[str, Any]], prompts: Sequence[str], group_size: int) -> list[bool]:
        n = len(rows) * group_size
        self._rows = [row for row in rows for _ in range(group_size)]
        self._keys = [f"{self._prefix}-{next(self._ids)}" for _ in range(n)]
        self._records = [
            EpisodeRecord(max_turns=self.max_turns, reward_mode=self.reward_mode) for _ in range(n)
        ]
        self._open = set(range(n))
        calls = {i: EpisodeCall.start(self._keys[i], self._rows[i]) for i in range(n)}
        steps = self._receive(*self._send(EpisodeServer.start, calls))
        for i, prompt in enumerate(p for p in prompts for _ in range(group_size)):
            first, over = record_step(self._records[i], steps[i])
            if not over:
                check_first_observation(self._records[i], first, prompt)
        return [not r.over for r in self._records]

    def step(self, actions: Mapping[int, str]) -> dict[int, tuple[str, bool]]:
        return self.collect(self.submit(actions))

    def submit(self, actions: Mapping[int, str]) -> Any:
        """`step` without waiting: the calls go out; `collect` their answers later."""
        calls = {
            i: EpisodeCall.step(self._keys[i], self._rows[i], self._records[i], action)
            for i, action in actions.items()
        }
        return self._send(EpisodeServer.step, calls), dict(actions)

    def collect(self, handle: Any) -> dict[int, tuple[str, bool]]:
        sent, actions = handle
        return {
            i: record_step(self._records[i], step, actions[i]) for i, step in self._receive(*sent).items()
        }

    def fresh(self) -> PoolEpisodes:
        """Another host on the same pool, for a micro-batch decoded beside this one's."""
        return PoolEpisodes(
            self._pool_of,
            max_turns=self.max_turns,
            reward_mode=self.reward_mode,
            aggregate_metrics=self.aggregate_metrics,
            failure_share=self.failure_share,
        )

    def failed(self) -> int:
        """Episodes of the batch that ended env_error or timeout so far."""
        return sum(r.status in FAILED_EPISODE_STATUSES for r in self._records)

    def finish(self, cut: Mapping[int, tuple[str, str | None]]) -> list[EpisodeResult]:
        still_held = {i: EpisodeCall.close(self._keys[i]) for i in sorted(self._open)}
        if still_held:  # episodes the sampler ended (budget, EOS) or refused: the workers let them go
            for i, step in self._receive(*self._send(EpisodeServer.close, still_held)).items():
                keep_episode_info(self._records[i], step)
            self._open.clear()
        results = [r.result(*cut.get(i, (None, None))) for i, r in enumerate(self._records)]
        self.failure_reasons = failure_reasons(results)
        self._records, self._keys, self._rows = [], [], []
        return results

    def _send(self, fn: Callable[..., Any], calls: Mapping[int, EpisodeCall]) -> tuple[list[int], Any]:
        """One call of each episode in `calls`, sent to its worker: (the episodes in sent order,
        the pool's ticket)."""
        pool = self._pool_of()
        size = pool.num_workers
        order = sorted(calls, key=lambda i: (i % size, i))  # one run of calls per worker
        ticket = pool.call(fn, ([calls[i] for i in order],), workers=[i % size for i in order])
        return order, ticket

    def _receive(self, order: list[int], ticket: Any) -> dict[int, EpisodeStep]:
        """Each episode's step (the trainer's failure policy counts the failed ones); an episode
        that ended is no longer held by its worker."""
        blocks, _ = self._pool_of().results([ticket])
        steps = [s for block in blocks for s in _steps(block)]
        for i, step in zip(order, steps, strict=True):
            if step.done:
                self._open.discard(i)  # the worker let it go already
        return dict(zip(order, steps, strict=True))


def _steps(block: Sequence[EpisodeStep] | Failed) -> Sequence[EpisodeStep]:
    """A chunk's steps; those of a call the pool could not complete, as failed steps."""
    return [failed_call(block.status, block.reason)] * len(block) if isinstance(block, Failed) else block
