"""What every task is made of: its section of the config (`TaskConfigBase`) and the task itself
(`Task`: the trainer's side, `trainer.task.TrainingTask`, plus what only the driver needs: the
held-out pairs, the training file, and the scorer the reward pool runs).

A task is one module of `service.tasks` holding a subclass of each; the registry finds it there
(`service.tasks`), and its name is its config's `name`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import Field

from rewards import Scorer
from rewards.styles import TOKEN_IDS
from trainer.config_base import Frozen
from trainer.data.pairs import Pair

if TYPE_CHECKING:
    from actors.pool.config import PoolConfig
    from rewards import RewardConfig
    from trainer.config import DataConfig, GRPOConfig, SamplingConfig, SFTConfig


class RunSections(Protocol):
    """The sections of a run's config that a task reads (the service's `ServiceConfig` has them):
    its own `task` section, the trainer's, the reward's and the pool's."""

    @property
    def task(self) -> Any: ...
    @property
    def data(self) -> DataConfig: ...
    @property
    def model(self) -> Any: ...
    @property
    def sampling(self) -> SamplingConfig: ...
    @property
    def sft(self) -> SFTConfig: ...
    @property
    def grpo(self) -> GRPOConfig: ...
    @property
    def reward(self) -> RewardConfig: ...
    @property
    def pool(self) -> PoolConfig: ...


class TaskConfigBase(Frozen):
    """Keys every task reads (how prompts reach an hf policy); a task's config adds its own and
    fixes `name` to its tag (`name: Literal["fen"] = "fen"`), which tells the variants apart."""

    name: str = Field(description="the task: its data, its scorer and its held-out figures")
    chat_template: bool = Field(
        False,
        description="model.source=hf: render each prompt as a user message through the tokenizer's chat "
        "template (instruct models)",
    )
    system: str | None = Field(None, description="with chat_template: a system message before each prompt")

    def data_files(self) -> tuple[str, ...]:
        """The files the task reads its rows from (a submitting client checks they are here)."""
        return ()


def check_stops(value: list[str] | None) -> list[str] | None:
    """A `stop` key's strings, refused when one is empty."""
    if value is not None and any(not s for s in value):
        raise ValueError(f"{value!r} holds an empty string; every stop string needs at least one character")
    return value


class Task(ABC):
    """One task; its module defines `config_class`, and the registry (`service.tasks.TASKS`) holds
    it under that config's name."""

    config_class: ClassVar[type[TaskConfigBase]]
    name: ClassVar[str]  # the config's tag, set from config_class
    # False when building the task needs what only the cluster may have (an engine binary): the
    # client's submit then leaves its data and reward checks to the driver.
    checked_at_submit: ClassVar[bool] = True
    # True when a sample is an episode with an environment (its result is its reward).
    episodic: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        config = cls.__dict__.get("config_class")
        if config is not None:
            cls.name = config.model_fields["name"].default

    @classmethod
    def check_config(cls, cfg: RunSections) -> str | None:
        """One line naming what in a run's config this task cannot use; None when all is well.

        Runs while the config is validated: no files are read here (that is `from_config`'s job).
        """
        return None

    @classmethod
    @abstractmethod
    def from_config(cls, cfg: RunSections) -> Task:
        """The task for a run's config (each task reads the sections it needs)."""

    @property
    @abstractmethod
    def alphabet(self) -> str: ...

    @property
    def stop(self) -> tuple[str, ...]:
        """Strings that end a completion besides EOS (`trainer.sampling.stop`)."""
        return ()

    @property
    def eval_group(self) -> tuple[str, Callable[[str], str]] | None:
        """(name, prompt -> key): held-out figures by key as `by_<name>` in evaluation records; None: none."""
        return None

    @abstractmethod
    def eval_pairs(self) -> list[Pair]:
        """The held-out pairs (deterministic; disjoint from training). ValueError when impossible."""

    @abstractmethod
    def training_pairs(self, log: Callable[[str], None]) -> list[Pair] | None:
        """The pairs of a training file, held-out ones removed; None when the task generates its own."""

    @abstractmethod
    def train_stream(self, file_pairs: Sequence[Pair] | None) -> Callable[[int], Pair]: ...

    def grpo_stream(self, file_pairs: Sequence[Pair] | None) -> Callable[[int], Pair]:
        """The stream GRPO steps draw from: the training stream, unless a task's pairs carry what
        only the SFT warm start reads and is costly to make (an environment's demonstration); such a
        task gives the same prompts and fields without it."""
        return self.train_stream(file_pairs)

    def generated_head(self, n: int) -> list[Pair]:
        """The first n pairs of the generated training stream, for the checks before a run (the
        model's positions and alphabet); a task whose pairs are costly to make overrides it."""
        stream = self.train_stream(None)
        return [stream(i) for i in range(n)]

    @abstractmethod
    def scorer(self) -> Scorer:
        """The scorer the reward pool runs for this task (user rewards included)."""

    def eval_metrics(self, scored: Sequence[Any]) -> dict[str, float]:
        return {}

    def episode_server(self) -> Any | None:
        """What the pool's workers keep for a task whose episodes run there
        (`rewards.env.remote.EpisodeServer`); None: the pool, if any, scores."""
        return None

    def episode_host(self, pool_of: Callable[[], Any] | None = None) -> Any | None:
        """Where a rank's episodes run, for a task whose samples are episodes with an environment
        (`trainer.sampling.episodes.EpisodeHost`; pool_of: the rank's reward pool, attached when
        called); None: one completion per sample, scored."""
        return None


def check_reward_fields(scorer: Scorer, lacking: Callable[[str], str | None]) -> None:
    """Refuse (ValueError, one line) a user reward that needs an argument the task's items lack.

    lacking(name): where the first item without `name` is ("file:line", or a sentence); None
    when every item has it. `completion` is always given; the target counts like any field.
    """
    for name, params in scorer.user_params.items():
        for needed in params.required:
            if needed == TOKEN_IDS:  # the run sends them with every item (`rewards.styles`)
                continue
            where = lacking(needed)
            if where is not None:
                raise ValueError(f"reward.user: {name!r} takes {needed!r}, which {where} lacks")
