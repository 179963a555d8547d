"""Trying an environment before a run: each sample row played twice with the same actions.

For every row: the time of each reset and step, the statuses the episodes ended with, the keys of
the infos its turns and episodes gave, the numbers of each episode's info (what a run averages
into `env_metrics`), what went wrong after an episode was played (a failing
`episode_info` or `close`), what the class's own `aggregate_metrics` makes of the episodes'
infos where it has one, and, where the environment declares itself deterministic, whether the
two plays gave the same observations and rewards (what replaying an episode relies on).
With a step deadline the episodes run in a child process (`rewards.env.process`): the first
episode that passes it ends the trial, so a hanging environment is reported after one deadline.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewards.env.base import Environment
from rewards.env.episode import TIMEOUT, Episode, EpisodeResult


@dataclass
class EnvTrial:
    rows: int = 0  # rows played
    stopped_at: str | None = None  # the row whose episode passed the step deadline, ending the trial
    episodes: int = 0
    calls: int = 0  # resets and steps
    seconds: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)  # first reason of each failed episode
    mismatches: list[str] = field(default_factory=list)  # rows whose two plays differed
    turns: int = 0  # steps answered
    turn_info_keys: Counter = field(default_factory=Counter)  # key -> turns whose info had it
    notes: list[str] = field(default_factory=list)  # reasons of episodes that ended ok all the same
    infos: list[dict[str, Any]] = field(default_factory=list)  # the episode_info of each that gave one
    aggregated: Any = None  # the class's aggregate_metrics(infos), where it has one
    aggregate_error: str | None = None  # why that call failed or gave no dict

    @property
    def step_s(self) -> float:
        return self.seconds / self.calls if self.calls else 0.0

    @property
    def episode_info_keys(self) -> Counter:
        """key -> episodes whose info had it."""
        return Counter(key for info in self.infos for key in info)

    @property
    def episode_numbers(self) -> dict[str, list[float]]:
        """key -> the finite numbers the episodes' infos gave it (what a run averages into env_metrics)."""
        numbers: dict[str, list[float]] = {}
        for info in self.infos:
            for key, value in info.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    numbers.setdefault(key, []).append(float(value))
        return numbers


def play(env_cls: type[Environment], row: Mapping[str, Any], actions: Sequence[str], max_turns: int,
         step_timeout_s: float | None) -> EpisodeResult:  # fmt: skip
    """One episode of `row` with the given actions (the episode may end before they run out)."""
    episode = Episode(env_cls, row, max_turns=max_turns, step_timeout_s=step_timeout_s)
    if episode.start() is not None:
        for action in actions:
            if episode.act(action)[1]:
                break
    return episode.end("ok")


def try_environment(
    env_cls: type[Environment],
    plays: Sequence[tuple[Mapping[str, Any], Sequence[str]]],
    max_turns: int,
    step_timeout_s: float | None = None,
) -> EnvTrial:
    """Play each (row, actions) twice; what it cost and what went wrong. A play past the step
    deadline ends the trial there (the rows after it are not played)."""
    trial = EnvTrial()
    for row, actions in plays:
        first = play(env_cls, row, actions, max_turns, step_timeout_s)
        if first.status == TIMEOUT:
            trial.rows += 1
            _count(trial, first)
            trial.errors.append(first.reason or TIMEOUT)
            trial.stopped_at = f"row {dict(row)!r:.80}"
            break
        second = play(env_cls, row, actions, max_turns, step_timeout_s)
        trial.rows += 1
        for result in (first, second):
            _count(trial, result)
        if first.reason and first.status != "ok":
            trial.errors.append(first.reason)
        elif first.reason:  # played, but its episode_info or close failed
            trial.notes.append(first.reason)
        same = first.transcript == second.transcript and first.reward == second.reward
        if env_cls.deterministic and not same:
            trial.mismatches.append(f"row {dict(row)!r:.80}: two plays of the same actions differ")
    _aggregate(env_cls, trial)
    return trial


def _count(trial: EnvTrial, result: EpisodeResult) -> None:
    trial.episodes += 1
    trial.calls += result.turns + 1
    trial.seconds += result.env_s
    trial.statuses[result.status] += 1
    trial.turns += len(result.infos)
    trial.turn_info_keys.update(key for info in result.infos for key in info)
    if result.episode_info is not None:
        trial.infos.append(dict(result.episode_info))


def _aggregate(env_cls: type[Environment], trial: EnvTrial) -> None:
    """The class's own aggregate_metrics over the trial's episode infos, as a step would call it
    (the infos of the episodes that gave one)."""
    if env_cls.aggregate_metrics is None:
        return
    try:
        trial.aggregated = env_cls.aggregate_metrics(list(trial.infos))
    except Exception as exc:
        trial.aggregate_error = f"{type(exc).__name__}: {exc}"[:300]
        return
    if not isinstance(trial.aggregated, Mapping):
        trial.aggregate_error = f"it returned {type(trial.aggregated).__name__}, not a dict"


def env_problem(trial: EnvTrial) -> str | None:
    """One line saying why a run should not start with this environment; None when it may."""
    if trial.stopped_at:
        return f"{trial.stopped_at} ended timeout: {trial.errors[-1]}; the trial stopped there"
    if trial.errors:
        return f"{len(trial.errors)} of {trial.rows} sample rows failed: {trial.errors[0]}"
    if trial.mismatches:
        return f"declared deterministic, but {trial.mismatches[0]}"
    if trial.aggregate_error:
        return f"aggregate_metrics failed on the {trial.episodes} sample episodes' infos: {trial.aggregate_error}"
    return None
