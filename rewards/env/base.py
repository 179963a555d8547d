"""What a user writes: an environment class, one instance per episode.

    class GuessNumber(Environment):
        deterministic = True              # the same row and actions give the same observations

        def reset(self, row) -> str:      # row: the data row (a dict); returns the first observation
            ...
        def step(self, action: str) -> StepResult | tuple[str, float, bool]:
            ...                           # (observation, reward, done), or with a 4th item, info
                                          # (gymnasium's 5 items are taken too)

`setup()` runs before `reset` and `close()` after the episode's last step, whatever ended it
(an instance may hold an engine or a temporary directory). A turn's reward may be 0 until the
last; the episode's reward is their sum, or the last one (`task.episode_reward`). A step may
return a fourth item, `info`: a dict of what the turn was about (as gymnasium's `info`, SkyRL's
`metadata`; gymnasium's five items are taken too), and an optional `episode_info()` says at the
end what the whole episode was about: the evaluation records keep both, and the trainer
averages the episode info's numbers into each step's `env_metrics` (or hands the step's episode
infos to the class's own `aggregate_metrics`, SkyRL's name); neither changes a reward.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any, ClassVar


class StepResult(tuple):
    """(observation, reward, done): what the policy reads next ("" when done), this turn's reward,
    whether the episode is over; `info`, what the turn was about (for the records), rides beside
    the three, so a StepResult unpacks and compares as the 3-tuple it always was."""

    def __new__(cls, observation: str, reward: float, done: bool, info: Mapping[str, Any] | None = None):
        self = super().__new__(cls, (observation, reward, done))
        self.info = info
        return self

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (*self, self.info)

    @property
    def observation(self) -> str:
        return self[0]

    @property
    def reward(self) -> float:
        return self[1]

    @property
    def done(self) -> bool:
        return self[2]

    def __repr__(self) -> str:
        extra = "" if self.info is None else f", info={self.info!r}"
        return f"StepResult(observation={self[0]!r}, reward={self[1]!r}, done={self[2]!r}{extra})"


class Environment:
    """Base class of an environment; subclasses override `reset` and `step`."""

    # True when the same row and the same actions always give the same observations and rewards:
    # an episode can then be rebuilt by replaying its actions (and `check_env` verifies it).
    deterministic: ClassVar[bool] = False
    # Every character its observations may hold (the built-in policy's tokenizer is built from it).
    alphabet: ClassVar[str] = ""
    # The strings that end the policy's turn (task.stop overrides them): the action is the text before.
    stop: ClassVar[tuple[str, ...]] = ("\n",)
    # Episodes whose steps may run at once in one process (threads): > 1 only for environments that
    # wait (I/O) and whose instances share nothing unsafe (`rewards.env.concurrency`).
    concurrent_steps: ClassVar[int] = 1
    # How a step's (or an evaluation's) episode infos become its `env_metrics`, as SkyRL's
    # `aggregate_metrics`: a staticmethod taking the list of every episode's `episode_info()` dict
    # (under data parallelism, every rank's) and returning {name: number}. None: the mean of each
    # key's numbers over the episodes that reported it.
    aggregate_metrics: ClassVar[Callable[[list[dict[str, Any]]], Mapping[str, Any]] | None] = None

    def setup(self) -> None:
        """Before the episode's `reset` (acquire what the instance needs)."""

    def reset(self, row: Mapping[str, Any]) -> str:
        raise NotImplementedError(f"{type(self).__name__} must define reset(row) -> first observation")

    def step(self, action: str) -> StepResult | tuple[str, float, bool] | tuple[str, float, bool, dict]:
        raise NotImplementedError(
            f"{type(self).__name__} must define step(action) -> (observation, reward, done)"
        )

    def episode_info(self) -> Mapping[str, Any] | None:
        """After the episode's last step (or where the sampler cut it), before `close`: what the
        whole episode was about, kept with its evaluation sample, its numbers averaged per key into
        `env_metrics` (SkyRL's `get_metrics`); None: nothing."""
        return None

    def close(self) -> None:
        """After the episode's last step (release what `setup` took)."""

    # ---- optional, for generated data and a warm start ----------------------------------------
    @classmethod
    def generate_row(cls, index: int, seed: int) -> Mapping[str, Any]:
        """Row `index` of the environment's own endless data (a pure function of index and seed);
        environments whose rows come only from a file need not define it."""
        raise NotImplementedError(
            f"{cls.__name__} has no generate_row: set task.path to a JSONL file of rows"
        )

    @classmethod
    def demonstration(cls, row: Mapping[str, Any], rng: random.Random) -> list[str] | None:
        """The list of a good episode's actions on `row`, one string per turn as the policy would
        write it (`["8", "12", "11"]`; a turn without a stop string gets the first one appended),
        drawing any choice from `rng`, for the SFT warm start: the episode is played through
        `reset` and `step`, whose answers go between the turns. None: none known."""
        return None
