"""The calls of an episode played in another process, and what each gives back.

An episode held elsewhere (`rewards.env.remote.EpisodeServer`, in a pool worker's process) is
played by calls of three kinds, each over a list of `EpisodeCall`s: `start` it (its row), `step` it
(the policy's action), `close` it (the sampler ended it). Every step carries the episode's actions
and observations so far, so a process that does not hold the episode (it was replaced after a
crash, or the call went elsewhere) can rebuild it by replaying them. Each call gives back an
`EpisodeStep`: the observation, the turn's reward, whether and how the episode ended, the
environment's infos; `record_step` brings the sampler's mirror of the episode (`EpisodeRecord`) up
to date with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rewards.env.episode import ENV_ERROR, FAILED_EPISODE_STATUSES, TIMEOUT, EpisodeRecord


@dataclass(frozen=True)
class EpisodeCall:
    """One call of episode `episode` (its id, unique across ranks and runs)."""

    episode: str
    row: Mapping[str, Any] | None = None  # start and step (a replay starts from it)
    action: str = ""  # step: the policy's action of this turn
    actions: tuple[str, ...] = ()  # step: the actions before this one, for a replay
    observations: tuple[str, ...] = ()  # step: the observations so far, for the replay's check

    @staticmethod
    def start(episode: str, row: Mapping[str, Any]) -> EpisodeCall:
        return EpisodeCall(episode, dict(row))

    @staticmethod
    def step(episode: str, row: Mapping[str, Any], record: EpisodeRecord, action: str) -> EpisodeCall:
        """The next action of an episode whose record holds what happened so far (before `action`)."""
        return EpisodeCall(
            episode,
            dict(row),
            action,
            actions=tuple(record.transcript[1::2]),
            observations=tuple(record.transcript[0::2]),
        )

    @staticmethod
    def close(episode: str) -> EpisodeCall:
        return EpisodeCall(episode)


@dataclass(frozen=True)
class EpisodeStep:
    """What one call of an episode gave back."""

    observation: str = ""  # start: the first observation; step: the environment's answer
    reward: float = 0.0  # the turn's reward
    status: str | None = None  # how the episode ended (`EPISODE_STATUSES`); None while it goes on
    reason: str | None = None  # why, for env_error / timeout / max_turns
    done_by_env: bool = False  # the environment said done
    env_s: float = 0.0  # seconds the call spent in the environment
    replayed: int = 0  # turns replayed to rebuild the episode for this call
    info: dict[str, Any] | None = None  # the step's info (JSON data), where it gave one
    episode_info: dict[str, Any] | None = None  # the environment's `episode_info`, once it ended

    @property
    def done(self) -> bool:
        """The episode is over (its process holds it no longer)."""
        return self.status is not None

    @staticmethod
    def failed(status: str, reason: str) -> EpisodeStep:
        """A call that failed: the episode ends with `status` (env_error or timeout)."""
        return EpisodeStep(status=status, reason=reason)


def failed_call(status: str, reason: str) -> EpisodeStep:
    """The step of a call the pool could not complete: `timeout` when it passed its deadline,
    `env_error` for any other failure (its worker kept dying)."""
    return EpisodeStep.failed(TIMEOUT if status == TIMEOUT else ENV_ERROR, reason)


def record_step(record: EpisodeRecord, step: EpisodeStep, action: str | None = None) -> tuple[str, bool]:
    """Bring the sampler's record of an episode up to date with one call's step (`action`: the
    policy's, for a step call; None for the start) -> (observation, episode over). The record
    applies the same rules as the episode that gave the step (done, max_turns); a step that
    failed ends the episode with its status."""
    if action is not None:
        record.acted(action)
    keep_episode_info(record, step)
    record.env_s += step.env_s
    record.replayed += step.replayed
    if step.status in FAILED_EPISODE_STATUSES:
        record.fail(step.status, step.reason or step.status)
        return "", True
    if action is None:
        first = record.started(step.observation)
        return first or "", first is None
    return record.answered((step.observation, step.reward, step.done_by_env, step.info))


def keep_episode_info(record: EpisodeRecord, step: EpisodeStep) -> None:
    """Keep the episode info a call brought back: the episode ended with that call (the
    environment's last step, or the close of one the sampler ended)."""
    if step.episode_info is not None:
        record.episode_info = step.episode_info


def check_first_observation(record: EpisodeRecord, first: str | None, prompt: str) -> None:
    """End an episode whose reset gave another first observation than its row's prompt (the prompt
    the policy was shown) with env_error."""
    if first is not None and first != prompt:
        record.fail(
            ENV_ERROR,
            f"reset gave {first[:60]!r}, not the row's prompt {prompt[:60]!r}: "
            "an environment's reset must depend on its row alone",
        )
