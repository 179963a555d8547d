"""Episodes played on the reward pool: the sampler's episode host when environments run there.

Each episode is given a worker (sample i of a batch: worker i mod the pool's size) and every call
of it (start, each step, close) is sent there, so its state stays in that worker's process; the
episodes of a batch that ended a turn at the same decoding step go out together, one call per
worker, and are stepped side by side. The pool treats these calls like any scoring: a call past
its deadline kills and replaces its worker and the episode ends `timeout`; a worker that dies is
replaced and the call runs again on a healthy worker, which rebuilds the episode by replaying its
recorded actions (`rewards.env.remote`). Here each episode is mirrored by an `EpisodeRecord`, so
the results read as the in-process host's (`rewards.env.host.LocalEpisodes`).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from actors.pool.reward_pool import RewardPool
from rewards.env.episode import (
    ENV_ERROR,
    FAILED_EPISODE_STATUSES,
    EpisodeRecord,
    EpisodeResult,
    failure_reasons,
)
from rewards.env.remote import CLOSE, START, STEP, apply_call, call_item, keep_episode_info


class PoolEpisodes:
    """The episodes of one sampling batch, played on the reward pool's workers."""

    def __init__(
        self,
        pool_of: Callable[[], RewardPool],
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
        replies = self._calls(START, {i: "" for i in range(n)})
        for i, prompt in enumerate(p for p in prompts for _ in range(group_size)):
            first, over = replies[i]
            if not over and first != prompt:
                self._records[i].fail(
                    ENV_ERROR, f"reset gave {first[:60]!r}, not the row's prompt {prompt[:60]!r}: "
                    "an environment's reset must depend on its row alone"
                )  # fmt: skip
        return [not r.over for r in self._records]

    def step(self, actions: Mapping[int, str]) -> dict[int, tuple[str, bool]]:
        return self._calls(STEP, actions)

    def submit(self, actions: Mapping[int, str]) -> Any:
        """`step` without waiting: the calls go out; `collect` their answers later."""
        return self._send(STEP, actions), dict(actions)

    def collect(self, handle: Any) -> dict[int, tuple[str, bool]]:
        (order, ticket), actions = handle
        return self._receive(STEP, actions, order, ticket)

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
        still_held = {i: "" for i in sorted(self._open)}
        if still_held:  # episodes the sampler ended (budget, EOS) or refused: the workers let them go
            self._calls(CLOSE, still_held)
        results = [r.result(*cut.get(i, (None, None))) for i, r in enumerate(self._records)]
        self.failure_reasons = failure_reasons(results)
        self._records, self._keys, self._rows = [], [], []
        return results

    def _calls(self, kind: str, actions: Mapping[int, str]) -> dict[int, tuple[str, bool]]:
        """One call of each episode in `actions` (its action), sent to its worker; returns each
        one's (observation, over) and keeps its record."""
        return self._receive(kind, actions, *self._send(kind, actions))

    def _send(self, kind: str, actions: Mapping[int, str]) -> tuple[list[int], Any]:
        pool = self._pool_of()
        order = sorted(actions, key=lambda i: (i % pool.cfg.num_workers, i))  # one run of calls per worker
        items = [call_item(kind, self._keys[i], self._rows[i], self._records[i]) for i in order]
        workers = [i % pool.cfg.num_workers for i in order]
        return order, pool.submit(
            [actions[i] for i in order], [None] * len(order), fields=items, workers=workers
        )

    def _receive(
        self, kind: str, actions: Mapping[int, str], order: list[int], ticket: Any
    ) -> dict[int, tuple[str, bool]]:
        results = self._pool_of().collect_results(
            [ticket], enforce_error_rate=False
        )  # the trainer counts them
        replies: dict[int, tuple[str, bool]] = {}
        for i, result in zip(order, results, strict=True):
            if kind == CLOSE:
                self._open.discard(i)
                if result.status == "ok":
                    keep_episode_info(self._records[i], result)
                continue
            replies[i] = apply_call(self._records[i], kind, actions[i], result)
            if result.components.get("over") or result.status != "ok":
                self._open.discard(i)  # the worker let it go already
        return replies
