"""A batch of episodes run in this process: what the sampler talks to while it decodes.

The sampler starts one episode per sample (K per row), hands over the actions of the samples that
ended a turn, and gets each one's observation back; `finish` closes them all and returns their
results in sample order. The methods match `trainer.sampling.episodes.EpisodeHost`. With a step
deadline the instances live in a child process of this thread (`rewards.env.process`), so a step
that never returns ends its episode `timeout` at the deadline and leaves nothing here blocked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewards.env.base import Environment
from rewards.env.calls import check_first_observation
from rewards.env.concurrency import map_steps
from rewards.env.episode import FAILED_EPISODE_STATUSES, Episode, EpisodeResult, failure_reasons
from rewards.env.loading import load_environment
from rewards.env.process import thread_process


class LocalEpisodes:
    """Episodes of one sampling batch, one `Episode` per sample, stepped in this process."""

    def __init__(
        self,
        env: str | type[Environment],
        *,
        max_turns: int,
        reward_mode: str = "sum",
        step_timeout_s: float | None = None,
        failure_share: float | None = None,
    ) -> None:
        """failure_share: the run's `pool.error_rate_threshold`, past which the sampler abandons a
        batch's remaining episodes (`trainer.sampling.episodes`); None: never."""
        self.env_cls = load_environment(env) if isinstance(env, str) else env
        self.failure_share, self.failure_share_key = failure_share, "pool.error_rate_threshold"
        self.aggregate_metrics = self.env_cls.aggregate_metrics  # None: the trainer's mean
        self.max_turns, self.reward_mode, self.step_timeout_s = max_turns, reward_mode, step_timeout_s
        self._episodes: list[Episode] = []
        self.failure_reasons: list[str] = []  # the last batch's, for a run that its errors end

    def start(self, rows: Sequence[Mapping[str, Any]], prompts: Sequence[str], group_size: int) -> list[bool]:
        """Start group_size episodes of each row (samples row after row); whether each one is running
        (False: it ended at once, `env_error`). Its first observation must be the row's prompt."""
        self._episodes = []
        for row, prompt in zip(rows, prompts, strict=True):
            for _ in range(group_size):
                episode = Episode(
                    self.env_cls,
                    row,
                    max_turns=self.max_turns,
                    reward_mode=self.reward_mode,
                    step_timeout_s=self.step_timeout_s,
                )
                check_first_observation(episode, episode.start(), prompt)
                self._episodes.append(episode)
        return [not e.over for e in self._episodes]

    def step(self, actions: Mapping[int, str]) -> dict[int, tuple[str, bool]]:
        """Sample index -> its action; returns sample index -> (observation, episode over)."""
        if self.step_timeout_s is not None:  # the episodes' child: forked by this thread, not a stepping one
            thread_process(self.env_cls).started()
        acted = map_steps(lambda item: self._episodes[item[0]].act(item[1]), list(actions.items()),
                          getattr(self.env_cls, "concurrent_steps", 1))  # fmt: skip
        return dict(zip(actions, acted, strict=True))

    def failed(self) -> int:
        """Episodes of the batch that ended env_error or timeout so far."""
        return sum(e.status in FAILED_EPISODE_STATUSES for e in self._episodes)

    def finish(self, cut: Mapping[int, tuple[str, str | None]]) -> list[EpisodeResult]:
        """Close every episode (cut: sample index -> (status, reason) the sampler ended it with)."""
        results = [e.end(*cut.get(i, (None, None))) for i, e in enumerate(self._episodes)]
        self._episodes = []
        self.failure_reasons = failure_reasons(results)
        return results
