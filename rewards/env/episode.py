"""One episode of an environment under the episode's rules, ending with an explicit status.

Statuses:
- `ok`: the environment said done (or the policy ended the episode with EOS);
- `max_tokens`: the sampler's token budget ran out first (the reward so far stands, as a
  completion cut at max_new_tokens keeps its reward);
- `max_turns`: the environment never said done within `max_turns` turns;
- `env_error`: reset or step raised, or returned something of the wrong shape;
- `timeout`: a step took longer than the step deadline;
- `abandoned`: not played on, because the batch's other episodes had already failed (env_error,
  timeout) past the run's failure share (`trainer.sampling.episodes`).
The last four carry no reward: the episode's group is handled like one with an unusable reward.
`env_error` and `timeout` count as failures in the run's failure policy; `abandoned` does not
(the failures that caused it are counted already).
Nothing raises out of an episode; the first failure's reason is kept for the records.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rewards.env.base import Environment, StepResult
from rewards.env.process import (
    CallTimedOut,
    EnvCallError,
    EnvProcess,
    InProcess,
    Instance,
    InstanceLost,
    thread_process,
)

OK, MAX_TOKENS, MAX_TURNS, ENV_ERROR, TIMEOUT = "ok", "max_tokens", "max_turns", "env_error", "timeout"
ABANDONED = "abandoned"
MAX_INFO_CHARS = 2000  # of a step's or an episode's info kept in the records, as JSON
EPISODE_STATUSES = (OK, MAX_TOKENS, MAX_TURNS, ENV_ERROR, TIMEOUT, ABANDONED)
FAILED_EPISODE_STATUSES = frozenset({ENV_ERROR, TIMEOUT})  # what the run's failure policy counts
USABLE_EPISODE_STATUSES = frozenset({OK, MAX_TOKENS})
REWARD_MODES = ("sum", "final")


@dataclass
class EpisodeResult:
    """How an episode ended, for the trainer and the records."""

    reward: float  # the episode's reward (0 where not usable: never trained on)
    usable: bool
    status: str
    turns: int  # actions the environment received
    env_s: float  # seconds spent in reset and step
    success: bool  # the environment ended it with a positive reward
    done_by_env: bool = False  # the environment said done (not the policy's EOS, not a limit)
    replayed: int = 0  # turns replayed to rebuild it on another worker (episodes on the pool)
    transcript: list[str] = field(default_factory=list)  # first observation, then action, observation, ...
    reason: str | None = None  # why, for env_error / timeout / max_turns
    infos: list[dict[str, Any]] = field(default_factory=list)  # each answered step's info ({}: none)
    episode_info: dict[str, Any] | None = None  # Environment.episode_info at its end, JSON-safe


def failure_reasons(results: list[EpisodeResult], most: int = 3) -> list[str]:
    """The reasons of the first `most` episodes that failed (env_error, timeout): what a run that
    its failed episodes end says (an abandoned episode's is not a failure's)."""
    return [r.reason for r in results if r.status in FAILED_EPISODE_STATUSES and r.reason][:most]


def checked_step(out: Any) -> StepResult:
    """`out` of a step as a StepResult; ValueError (one line) when it has the wrong shape.

    Taken: (observation, reward, done), the same with info, and gymnasium's (observation, reward,
    terminated, truncated, info), where either flag ends the episode; numpy numbers and bools too."""
    if not isinstance(out, tuple | list) or len(out) not in (3, 4, 5):
        raise ValueError(
            f"step must return (observation, reward, done), with info, or gymnasium's five items, got {_preview(out)}"
        )
    observation, reward = out[:2]
    flags = out[2:4] if len(out) == 5 else out[2:3]
    info = checked_info(out[len(flags) + 2] if len(out) > 3 else getattr(out, "info", None))
    if not isinstance(observation, str):
        raise ValueError(f"step's observation must be a str, got {type(observation).__name__}")
    if isinstance(reward, bool) or not isinstance(reward, numbers.Real) or not math.isfinite(reward):
        raise ValueError(f"step's reward must be a finite number, got {_preview(reward)}")
    for flag in flags:
        if not _is_bool(flag):
            raise ValueError(f"step's done must be a bool, got {type(flag).__name__}")
    return StepResult(observation, float(reward), any(bool(f) for f in flags), info)


def _is_bool(flag: Any) -> bool:
    """A bool, or a numpy one (what gymnasium environments often return)."""
    numpy_bool = (
        getattr(getattr(flag, "dtype", None), "kind", "") == "b" and getattr(flag, "shape", None) == ()
    )
    return isinstance(flag, bool) or numpy_bool


def checked_info(info: Any, what: str = "step's info") -> dict[str, Any] | None:
    """A step's (or an episode's) info as JSON-safe data for the records: a mapping's copy (numpy
    and torch values as lists or numbers, other values JSON cannot hold as their repr), None for
    None or an empty one; ValueError when it is no mapping. One larger than MAX_INFO_CHARS as JSON
    is replaced by a note saying so."""
    if info is None:
        return None
    if not isinstance(info, Mapping):
        raise ValueError(f"{what} must be a dict, got {type(info).__name__}")
    if not info:
        return None
    try:
        text = json.dumps({str(k): v for k, v in info.items()}, default=_jsonable, allow_nan=False)
    except (TypeError, ValueError) as exc:  # a NaN, a cycle, a nested dict with keys JSON has not
        raise ValueError(f"{what} cannot be recorded as JSON: {exc}") from None
    if len(text) > MAX_INFO_CHARS:
        return {"info_dropped": f"{len(text)} characters of JSON, over the {MAX_INFO_CHARS} kept"}
    return json.loads(text)


def _jsonable(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)  # numpy and torch scalars and arrays
    return tolist() if callable(tolist) else repr(value)


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class EpisodeRecord:
    """What happened in an episode (rewards, transcript, status), kept by whoever plays it or
    mirrors it: `Episode` here, the sampler's side of an episode played on a reward worker."""

    def __init__(self, *, max_turns: int, reward_mode: str = "sum") -> None:
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        self.max_turns, self.reward_mode = max_turns, reward_mode
        self.rewards: list[float] = []
        self.transcript: list[str] = []  # first observation, then action, observation, ...
        self.infos: list[dict[str, Any]] = []  # each answered step's info ({} when it gave none)
        self.episode_info: dict[str, Any] | None = None  # what the environment said at the end
        self.turns = 0  # actions the environment received
        self.env_s = 0.0
        self.status: str | None = None  # set when the episode is over
        self.reason: str | None = None
        self.done_by_env = False
        self.replayed = 0

    @property
    def over(self) -> bool:
        return self.status is not None

    def fail(self, status: str, reason: str) -> None:
        self.status, self.reason = status, reason

    def started(self, first: Any) -> str | None:
        """Record reset's first observation; None (and env_error) when it is not text."""
        if not isinstance(first, str):
            self.fail(ENV_ERROR, f"reset must return the first observation (a str), got {_preview(first)}")
            return None
        self.transcript.append(first)
        return first

    def acted(self, action: str) -> None:
        self.turns += 1
        self.transcript.append(action)

    def answered(self, out: Any) -> tuple[str, bool]:
        """Record a step's output -> (observation, episode over); a wrong shape is env_error."""
        try:
            result = checked_step(out)
        except ValueError as exc:
            self.fail(ENV_ERROR, str(exc))
            return "", True
        self.rewards.append(result.reward)
        self.transcript.append(result.observation)
        self.infos.append(result.info or {})
        if result.done:
            self.status, self.done_by_env = OK, True
        elif self.turns >= self.max_turns:
            self.fail(MAX_TURNS, f"not done after task.max_turns={self.max_turns} turns")
        return ("", True) if self.over else (result.observation, False)

    def result(self, cut: str | None = None, reason: str | None = None) -> EpisodeResult:
        """How the episode ended; cut: the status the sampler ended it with (`max_tokens`, `ok`
        for the policy's EOS, `env_error` for an observation it cannot write) when it was still
        going, and why."""
        if not self.over:
            self.status, self.reason = cut or MAX_TOKENS, reason
        usable = self.status in USABLE_EPISODE_STATUSES
        reward = (
            (sum(self.rewards) if self.reward_mode == "sum" else self.rewards[-1]) if self.rewards else 0.0
        )
        return EpisodeResult(
            reward=reward if usable else 0.0,
            usable=usable,
            status=self.status,
            turns=self.turns,
            env_s=self.env_s,
            success=self.done_by_env and usable and reward > 0,
            done_by_env=self.done_by_env,
            replayed=self.replayed,
            transcript=list(self.transcript),
            reason=self.reason,
            infos=list(self.infos),
            episode_info=self.episode_info,
        )


class Episode(EpisodeRecord):
    """An environment instance playing one row; `start`, then `act` per turn, then `end`.

    The instance lives where `process` keeps it: a child process (`rewards.env.process.EnvProcess`;
    by default, with a step deadline, this thread's), whose calls are ended at the deadline, or,
    without a deadline, this process. An instance lost with its child (killed at another episode's
    deadline) is rebuilt by replaying the recorded actions when the environment is deterministic;
    otherwise the episode ends `env_error`."""

    def __init__(
        self,
        env_cls: type[Environment],
        row: Mapping[str, Any],
        *,
        max_turns: int,
        reward_mode: str = "sum",
        step_timeout_s: float | None = None,
        process: EnvProcess | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns, reward_mode=reward_mode)
        self.env_cls, self.row, self.step_timeout_s = env_cls, row, step_timeout_s
        if process is None:
            process = InProcess(env_cls) if step_timeout_s is None else thread_process(env_cls)
        self.process: EnvProcess | InProcess = process
        self.env: Instance | None = None

    def _limit(self, limit: Limit | None) -> Limit:
        if limit is not None:
            return limit
        named = None if self.step_timeout_s is None else f"task.step_timeout_s={self.step_timeout_s:g}s"
        return Limit(self.step_timeout_s, named)

    def _timed(
        self, what: str, call: Callable[[float | None], tuple[Any, float]], limit: Limit | None = None
    ) -> Any:
        """call(deadline) -> (value, seconds) timed against the deadline; a late, failing or lost
        call ends the episode (returns None then). InstanceLost goes to the caller."""
        seconds, named = self._limit(limit)
        try:
            out, took = call(seconds)
        except CallTimedOut:
            self.env_s += seconds or 0.0
            self.fail(
                TIMEOUT,
                f"{what} took over {seconds:g}s without returning, past {named}; its process was ended",
            )
            return None
        except EnvCallError as exc:  # the environment's own failure: a status, never a crash
            self.env_s += exc.took_s
            self.fail(ENV_ERROR, f"{what} raised {exc.type_name}: {exc.message}")
            return None
        self.env_s += took
        if seconds is not None and took > seconds:
            self.fail(TIMEOUT, f"{what} took {took:.2f}s, past {named}")
            return None
        return out

    def _method(self, what: str, method: str, *args: Any, limit: Limit | None = None) -> Any:
        env = self.env
        return self._timed(what, lambda s: self.process.call(env, method, args, s), limit)

    def start(self, limit: Limit | None = None) -> str | None:
        """The first observation; None when the environment could not start (status env_error, or
        timeout past the deadline)."""
        first = self._instance(limit)
        return None if first is None else self.started(first)

    def _instance(self, limit: Limit | None = None) -> str | None:
        """A new instance, set up and reset: its first observation (None: the episode is over)."""
        try:
            self.env = self._timed("the constructor", self.process.new, limit)
            if self.over:
                return None
            self._method("setup", "setup", limit=limit)
            if self.over:
                return None
            first = self._method("reset", "reset", self.row, limit=limit)
        except InstanceLost as exc:  # its child died under it
            self.fail(ENV_ERROR, f"the environment's process died while it started ({exc})")
            return None
        return None if self.over else first

    def act(self, action: str, limit: Limit | None = None) -> tuple[str, bool]:
        """The policy's action of one turn -> (observation, episode over); `limit`: a deadline other
        than the step deadline (the pool's call running out)."""
        if self.over:
            return "", True
        self.acted(action)
        try:
            out = self._method("step", "step", action, limit=limit)
        except InstanceLost:
            out = self._stepped_after_rebuild(action, limit)
        return ("", True) if self.over else self.answered(out)

    def _stepped_after_rebuild(self, action: str, limit: Limit | None) -> Any:
        """The step again, on an instance rebuilt from the recorded actions (deterministic
        environments only); None with the episode over when it cannot be."""
        if not self.env_cls.deterministic:
            self.fail(
                ENV_ERROR,
                "its environment process was ended (another episode's call passed its deadline) and "
                f"{self.env_cls.__name__} is not deterministic (Environment.deterministic): it cannot be replayed",
            )
            return None
        actions, observations = self.transcript[1:-1:2], self.transcript[0::2]
        try:
            if self._instance(limit) != observations[0] and not self.over:
                self.fail(
                    ENV_ERROR, "rebuilt, the episode's reset gave another first observation than recorded"
                )
            for earlier, seen in zip(actions, observations[1:], strict=True):
                if self.over:
                    break
                out = self._method("step", "step", earlier, limit=limit)
                if not self.over and (out is None or checked_step(out).observation != seen):
                    self.fail(
                        ENV_ERROR,
                        f"replaying {len(actions)} recorded actions gave other observations than recorded",
                    )
                self.replayed += 1
            return None if self.over else self._method("step", "step", action, limit=limit)
        except InstanceLost as exc:
            self.fail(
                ENV_ERROR, f"the environment's process died again while the episode was rebuilt ({exc})"
            )
        except ValueError as exc:  # a replayed step of the wrong shape
            self.fail(ENV_ERROR, str(exc))
        return None

    def end(self, cut: str | None = None, reason: str | None = None) -> EpisodeResult:
        """Ask the environment what the episode was about, close it, and say how the episode ended
        (`EpisodeRecord.result`). A failing `episode_info` or `close` spoils nothing already
        played, but is said (the result's reason, where it has none)."""
        said = self._episode_info() if self.env is not None else None
        result = self.result(cut, reason)
        if self.env is not None:
            said = said or self._closed()
            self.process.release(self.env)
            self.env = None
        result.reason = result.reason or said
        return result

    def _closed(self) -> str | None:
        """Close the instance; what went wrong, if anything."""
        try:
            self.process.call(self.env, "close", (), self._limit(None).seconds)
        except CallTimedOut:
            return f"close took over {self._limit(None).seconds:g}s without returning, past {self._limit(None).named}"
        except EnvCallError as exc:
            return f"close raised {exc.type_name}: {exc.message}"
        except InstanceLost:
            pass  # its process is gone, and the instance with it
        return None

    def _episode_info(self) -> str | None:
        """Keep the environment's `episode_info`; what went wrong, if anything."""
        try:
            info, _ = self.process.call(self.env, "episode_info", (), self._limit(None).seconds)
            self.episode_info = checked_info(info, "episode_info")
        except CallTimedOut:
            return f"episode_info took over {self._limit(None).seconds:g}s without returning, past {self._limit(None).named}"
        except EnvCallError as exc:
            return f"episode_info raised {exc.type_name}: {exc.message}"
        except InstanceLost:
            return "episode_info was not asked: the environment's process was gone"
        except ValueError as exc:
            return f"episode_info raised ValueError: {exc}"
        return None


class Limit(NamedTuple):
    """A call's deadline in seconds (None: none) and how a reason names it ('task.step_timeout_s=10s')."""

    seconds: float | None
    named: str | None
