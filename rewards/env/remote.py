"""Episodes played by a reward worker: the worker's scorer is an `EpisodeCalls`, and each item it
scores is one call of one episode (start it, step it, close it).

The episode lives in the worker's process between its calls (its state stays there), keyed by
the episode's id. Every step call also carries the episode's actions and observations so far:
a worker that does not hold the episode (it was replaced after a crash, or the pool sent the call
elsewhere) rebuilds it by replaying those actions, when the environment declares itself
deterministic, and checks that the replay gives the recorded observations; an environment that
is not deterministic ends such an episode with `env_error` instead.

With a step deadline the worker keeps its episodes' instances in a child process
(`rewards.env.process`): a step past the deadline ends its episode `timeout` there and the worker
answers the rest of the call, instead of the pool killing the worker at the call's deadline (and
running the call again, to hang again). The steps of one call share the call's time: a step gets
the step deadline or what is left of `call_budget_s` (kept under the pool's `chunk_timeout_s`),
whichever is less, and a step the call had no time left for ends its episode `timeout` unplayed.

A call's result is a `ScoreResult`: the turn's reward as its total, the observation as its text,
and in its components whether the episode is over (`over`), how (`end`: an index into
`EPISODE_STATUSES`, -1 while it goes on), whether the environment said done (`by_env`), the
seconds spent in the environment (`env_s`) and the turns replayed (`replayed`); as its info, the
step's (`turn`) and, once the episode ended, the environment's `episode_info` (`episode`).
`apply_call` turns it back into the sampler's record of the episode.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from rewards.env.base import Environment
from rewards.env.concurrency import map_steps
from rewards.env.episode import ENV_ERROR, EPISODE_STATUSES, TIMEOUT, Episode, EpisodeRecord, Limit
from rewards.env.loading import load_environment
from rewards.env.process import EnvProcess
from rewards.result import OK, ScoreResult
from rewards.result import TIMEOUT as CALL_TIMEOUT

START, STEP, CLOSE = "start", "step", "close"
MAX_HELD_EPISODES = 4096  # episodes a worker keeps; beyond it the least recently used are closed


def call_item(
    kind: str, key: str, row: Mapping[str, Any], record: EpisodeRecord | None = None
) -> dict[str, Any]:
    """The fields of one call of episode `key` (with the record so far, for a replay)."""
    item: dict[str, Any] = {"call": kind, "episode": key}
    if kind != CLOSE:
        item["row"] = dict(row)
    if kind == STEP and record is not None:  # the record before this call's action
        item["actions"] = record.transcript[1::2]
        item["observations"] = record.transcript[0::2]
    return item


class EpisodeCalls:
    """The scorer of a reward pool that plays episodes (`rewards.env.remote`)."""

    task_name = "env"
    concurrent = False
    takes_token_ids = False  # an episode's result is its reward: no scored item carries ids

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
        """Import the environment when the worker starts (one that cannot be found fails it
        visibly), and fork the process its instances live in."""
        _ = self.env_cls
        if self.process is not None:
            self.process.started()

    def held(self) -> int:
        return len(self._held)

    def score_batch(
        self, completions: Sequence[Any], targets: Sequence[Any], rows: Sequence[Any] | None
    ) -> list[ScoreResult]:
        if rows is None:
            raise ValueError("episode calls carry their episode in the item's fields")
        calls = list(zip(rows, completions, strict=True))
        ends = None if self.call_budget_s is None else time.monotonic() + self.call_budget_s
        if self.process is not None:
            self.process.started()  # forked by this thread, not by one of the stepping threads
        return map_steps(
            lambda c: self.call(*c, call_ends=ends), calls, getattr(self.env_cls, "concurrent_steps", 1)
        )

    def _limit(self, call_ends: float | None) -> Limit | None:
        """The step's deadline: the step deadline, or what is left of the call's time if less."""
        if call_ends is None:
            return None
        left = max(0.0, call_ends - time.monotonic())
        if self.step_timeout_s is not None and self.step_timeout_s <= left:
            return Limit(self.step_timeout_s, f"task.step_timeout_s={self.step_timeout_s:g}s")
        return Limit(left, f"the {left:.2f}s left of its pool call (pool.chunk_timeout_s)")

    def call(self, item: Mapping[str, Any], action: str, call_ends: float | None = None) -> ScoreResult:
        key, kind = item["episode"], item["call"]
        if kind == CLOSE:
            with self._lock:
                episode = self._held.pop(key, None)
            if episode is not None:
                episode.end()
            return ScoreResult(0.0, {}, OK, info=_carried(None, episode and episode.episode_info))
        if kind == START:
            episode = self._new(item["row"])
            first = episode.start(self._limit(call_ends))
            return self._answer(key, episode, first or "", 0.0, 0)
        with self._lock:  # held again (most recently used) by _answer while it goes on
            episode, replayed = self._held.pop(key, None), 0
        if episode is None or episode.turns != len(item.get("actions", ())):
            if episode is not None:
                episode.end()
            episode, replayed = self._replay(item, call_ends)
            if episode.over:
                return self._answer(key, episode, "", 0.0, replayed)
        spent, limit = episode.env_s, self._limit(call_ends)
        if limit is not None and limit.seconds <= 0.0:
            episode.acted(action)
            episode.fail(
                TIMEOUT, "not stepped: its pool call's earlier steps took its time (pool.chunk_timeout_s)"
            )
            return self._answer(key, episode, "", 0.0, replayed)
        episode.act(action, limit)
        answered = len(episode.transcript) == 2 * episode.turns + 1  # the step gave an observation
        observation = episode.transcript[-1] if answered else ""
        reward = episode.rewards[-1] if answered else 0.0
        turn_info = (episode.infos[-1] or None) if answered else None
        return self._answer(key, episode, observation, reward, replayed, episode.env_s - spent, turn_info)

    def _new(self, row: Mapping[str, Any]) -> Episode:
        return Episode(
            self.env_cls,
            row,
            max_turns=self.max_turns,
            reward_mode=self.reward_mode,
            step_timeout_s=self.step_timeout_s,
            process=self.process,
        )

    def _replay(self, item: Mapping[str, Any], call_ends: float | None = None) -> tuple[Episode, int]:
        """The episode rebuilt from its recorded actions; over (env_error) when it cannot be."""
        episode = self._new(item["row"])
        actions, observations = list(item.get("actions", ())), list(item.get("observations", ()))
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
        turn_info: dict[str, Any] | None = None,
    ) -> ScoreResult:
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
        components = {
            "over": float(episode.over),
            "end": float(EPISODE_STATUSES.index(episode.status)) if episode.over else -1.0,
            "by_env": float(episode.done_by_env),
            "env_s": episode.env_s if env_s is None else env_s,
            "replayed": float(replayed),
        }
        info = _carried(turn_info, episode.episode_info)  # the episode's: only once it ended
        return ScoreResult(
            reward, components, OK, episode.reason if episode.over else None, observation, info
        )


def _carried(turn: dict[str, Any] | None, episode: dict[str, Any] | None) -> dict[str, Any] | None:
    """A call's info: the turn's and the episode's (`Environment.episode_info`), where given."""
    info = {k: v for k, v in (("turn", turn), ("episode", episode)) if v is not None}
    return info or None


def _rebuild(
    env: str,
    max_turns: int,
    reward_mode: str,
    step_timeout_s: float | None,
    call_budget_s: float | None = None,
) -> EpisodeCalls:
    return EpisodeCalls(
        env,
        max_turns=max_turns,
        reward_mode=reward_mode,
        step_timeout_s=step_timeout_s,
        call_budget_s=call_budget_s,
    )


def apply_call(record: EpisodeRecord, kind: str, action: str, result: ScoreResult) -> tuple[str, bool]:
    """Bring the sampler's record of an episode up to date with one call's result -> (observation,
    episode over). A call the pool could not complete (its deadline passed, its worker kept dying)
    ends the episode with `timeout` or `env_error`."""
    if kind == STEP:
        record.acted(action)
    if result.status != OK:
        record.fail(TIMEOUT if result.status == CALL_TIMEOUT else ENV_ERROR, result.reason or result.status)
        return "", True
    keep_episode_info(record, result)
    parts = result.components
    record.env_s += parts.get("env_s", 0.0)
    record.replayed += int(parts.get("replayed", 0.0))
    end = int(parts.get("end", -1.0))
    if end >= 0 and EPISODE_STATUSES[end] in (ENV_ERROR, TIMEOUT):  # the environment failed there
        record.fail(EPISODE_STATUSES[end], result.reason or EPISODE_STATUSES[end])
        return "", True
    if kind == START:
        first = record.started(result.text)
        return first or "", first is None
    # the record applies the same rules as the worker's episode (done, max_turns)
    turn_info = (result.info or {}).get("turn")
    return record.answered((result.text or "", result.total, bool(parts.get("by_env")), turn_info))


def keep_episode_info(record: EpisodeRecord, result: ScoreResult) -> None:
    """Keep the episode info a call brought back: the worker's episode ended with that call (the
    environment's last step, or the CLOSE of one the sampler ended)."""
    episode_info = (result.info or {}).get("episode")
    if episode_info is not None:
        record.episode_info = episode_info


__all__ = ["CLOSE", "START", "STEP", "EpisodeCalls", "apply_call", "keep_episode_info", "call_item"]
