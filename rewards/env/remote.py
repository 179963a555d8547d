"""Episodes held in a process of their own (a pool worker's), played by calls from the sampler.

An `EpisodeServer` keeps the episodes it plays between their calls (their state stays in its
process), keyed by the episode's id, and answers calls of three kinds, each over a list of
`rewards.env.calls.EpisodeCall`s: `start`, `step` and `close`. Each call gives back an `EpisodeStep`.
A step of an episode the server does not hold (its process was replaced after a crash, or the call
was sent elsewhere) rebuilds it by replaying the actions the call carries, when the environment
declares itself deterministic, and checks that the replay gives the recorded observations; an
environment that is not deterministic ends such an episode with `env_error` instead.

With a step deadline the server keeps its episodes' instances in a child process
(`rewards.env.process`): a step past the deadline ends its episode `timeout` there and the server
answers the rest of the call, instead of the pool killing the worker at the call's deadline (and
running the call again, to hang again). The steps of one call share the call's time: a step gets
the step deadline or what is left of `call_budget_s` (kept under the pool's `chunk_timeout_s`),
whichever is less, and a step the call had no time left for ends its episode `timeout` unplayed.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rewards.env.base import Environment
from rewards.env.calls import EpisodeCall, EpisodeStep
from rewards.env.concurrency import map_steps
from rewards.env.episode import ENV_ERROR, TIMEOUT, Episode, Limit
from rewards.env.loading import load_environment
from rewards.env.process import EnvProcess

MAX_HELD_EPISODES = 4096  # episodes a server keeps; beyond it the least recently used are closed


class EpisodeServer:
    """The episodes of one process, played by start, step and close calls (`rewards.env.remote`)."""

    def __init__(
        self,
        env: str,
        *,
        max_turns: int,
        reward_mode: str = "sum",
        step_timeout_s: float | None = None,
        call_budget_s: float | None = None,
    ):
        self.env, self.max_turns, self.reward_mode = env, max_turns, reward_mode
        self.step_timeout_s, self.call_budget_s = step_timeout_s, call_budget_s
        self._held: OrderedDict[str, Episode] = OrderedDict()
        self._lock = threading.Lock()  # episodes may be stepped on threads (concurrent_steps)
        self._env_cls: type[Environment] | None = None
        self._process: EnvProcess | None = None

    def __reduce__(self):  # the held episodes stay where they are played
        return (
            _rebuild,
            (self.env, self.max_turns, self.reward_mode, self.step_timeout_s, self.call_budget_s),
        )

    @property
    def env_cls(self) -> type[Environment]:
        if self._env_cls is None:
            self._env_cls = load_environment(self.env)
        return self._env_cls

    @property
    def process(self) -> EnvProcess | None:
        """The child process holding the episodes' instances (None without a deadline: here)."""
        if self._process is None and (self.step_timeout_s is not None or self.call_budget_s is not None):
            self._process = EnvProcess(self.env_cls)
        return self._process

    def setup(self) -> None:
        """Import the environment when the process starts serving (one that cannot be found fails
        it visibly), and fork the process its instances live in."""
        _ = self.env_cls
        if self.process is not None:
            self.process.started()

    def held(self) -> int:
        return len(self._held)

    # ---- the three calls --------------------------------------------------------------------

    def start(self, calls: Sequence[EpisodeCall]) -> list[EpisodeStep]:
        """Start each call's episode from its row: its first observation."""
        return self._each(self._start, calls)

    def step(self, calls: Sequence[EpisodeCall]) -> list[EpisodeStep]:
        """Hand each call's episode its action: the environment's answer."""
        return self._each(self._step, calls)

    def close(self, calls: Sequence[EpisodeCall]) -> list[EpisodeStep]:
        """Let each call's episode go (the sampler ended it): its episode info, where it had one."""
        return self._each(self._close, calls)

    def _each(
        self, one: Callable[[EpisodeCall, float | None], EpisodeStep], calls: Sequence[EpisodeCall]
    ) -> list[EpisodeStep]:
        """`one` over the calls, stepped side by side up to the environment's `concurrent_steps`,
        sharing `call_budget_s`."""
        ends = None if self.call_budget_s is None else time.monotonic() + self.call_budget_s
        if self.process is not None:
            self.process.started()  # forked by this thread, not by one of the stepping threads
        return map_steps(lambda c: one(c, ends), list(calls), getattr(self.env_cls, "concurrent_steps", 1))

    def _limit(self, call_ends: float | None) -> Limit | None:
        """The step's deadline: the step deadline, or what is left of the call's time if less."""
        if call_ends is None:
            return None
        left = max(0.0, call_ends - time.monotonic())
        if self.step_timeout_s is not None and self.step_timeout_s <= left:
            return Limit(self.step_timeout_s, f"task.step_timeout_s={self.step_timeout_s:g}s")
        return Limit(left, f"the {left:.2f}s left of its pool call (pool.chunk_timeout_s)")

    def _start(self, call: EpisodeCall, call_ends: float | None = None) -> EpisodeStep:
        episode = self._new(call.row or {})
        first = episode.start(self._limit(call_ends))
        return self._answer(call.episode, episode, first or "", 0.0, 0)

    def _close(self, call: EpisodeCall, call_ends: float | None = None) -> EpisodeStep:
        with self._lock:
            episode = self._held.pop(call.episode, None)
        if episode is None:
            return EpisodeStep()
        episode.end()
        return EpisodeStep(episode_info=episode.episode_info)

    def _step(self, call: EpisodeCall, call_ends: float | None = None) -> EpisodeStep:
        key = call.episode
        with self._lock:  # held again (most recently used) by _answer while it goes on
            episode, replayed = self._held.pop(key, None), 0
        if episode is None or episode.turns != len(call.actions):
            if episode is not None:
                episode.end()
            episode, replayed = self._replay(call, call_ends)
            if episode.over:
                return self._answer(key, episode, "", 0.0, replayed)
        spent, rebuilt, limit = episode.env_s, episode.replayed, self._limit(call_ends)
        if limit is not None and limit.seconds <= 0.0:
            episode.acted(call.action)
            episode.fail(
                TIMEOUT, "not stepped: its pool call's earlier steps took its time (pool.chunk_timeout_s)"
            )
            return self._answer(key, episode, "", 0.0, replayed)
        episode.act(call.action, limit)
        answered = len(episode.transcript) == 2 * episode.turns + 1  # the step gave an observation
        observation = episode.transcript[-1] if answered else ""
        reward = episode.rewards[-1] if answered else 0.0
        info = (episode.infos[-1] or None) if answered else None
        replayed += episode.replayed - rebuilt  # rebuilt in a fresh child (a deadline ended the last)
        return self._answer(key, episode, observation, reward, replayed, episode.env_s - spent, info)

    def _new(self, row: Mapping[str, Any]) -> Episode:
        return Episode(
            self.env_cls,
            row,
            max_turns=self.max_turns,
            reward_mode=self.reward_mode,
            step_timeout_s=self.step_timeout_s,
            process=self.process,
        )

    def _replay(self, call: EpisodeCall, call_ends: float | None = None) -> tuple[Episode, int]:
        """The episode rebuilt from its recorded actions; over (env_error) when it cannot be."""
        episode = self._new(call.row or {})
        actions, observations = list(call.actions), list(call.observations)
        if not self.env_cls.deterministic:
            episode.fail(
                ENV_ERROR,
                f"the episode's state was lost (its reward worker was replaced) and {self.env_cls.__name__} "
                "is not deterministic (Environment.deterministic): it cannot be replayed",
            )
            return episode, 0
        seen = [episode.start(self._limit(call_ends))]
        for action in actions:
            if episode.over:
                break
            seen.append(episode.act(action, self._limit(call_ends))[0])
        if not episode.over and seen != observations[: len(seen)]:
            episode.fail(
                ENV_ERROR, f"replaying {len(actions)} recorded actions gave other observations than recorded"
            )
        elif episode.over and episode.status != ENV_ERROR:
            episode.fail(ENV_ERROR, f"the replay of {len(actions)} recorded actions ended the episode early")
        return episode, len(actions)

    def _answer(
        self,
        key: str,
        episode: Episode,
        observation: str,
        reward: float,
        replayed: int,
        env_s: float | None = None,
        info: dict[str, Any] | None = None,
    ) -> EpisodeStep:
        if episode.over:
            with self._lock:
                self._held.pop(key, None)
            episode.end()
        else:
            with self._lock:
                self._held[key] = episode
                evicted = [
                    self._held.popitem(last=False)[1] for _ in range(len(self._held) - MAX_HELD_EPISODES)
                ]
            for old in evicted:
                old.end()
        return EpisodeStep(
            observation=observation,
            reward=reward,
            status=episode.status if episode.over else None,
            reason=episode.reason if episode.over else None,
            done_by_env=episode.done_by_env,
            env_s=episode.env_s if env_s is None else env_s,
            replayed=replayed,
            info=info,
            episode_info=episode.episode_info,  # the episode's: only once it ended
        )


def _rebuild(
    env: str,
    max_turns: int,
    reward_mode: str,
    step_timeout_s: float | None,
    call_budget_s: float | None = None,
) -> EpisodeServer:
    return EpisodeServer(
        env,
        max_turns=max_turns,
        reward_mode=reward_mode,
        step_timeout_s=step_timeout_s,
        call_budget_s=call_budget_s,
    )


__all__ = ["MAX_HELD_EPISODES", "EpisodeServer"]
