"""The service's view of a task: the trainer's side (`trainer.task.TrainingTask`) plus what only
the driver needs: the held-out pairs, the training file, and the scorer the reward pool runs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from rewards import Scorer
from rewards.styles import TOKEN_IDS
from trainer.data.pairs import Pair

if TYPE_CHECKING:
    from service.config import ServiceConfig


class Task(ABC):
    """One task; subclasses register under `name` (see `service.tasks.TASKS`)."""

    name: ClassVar[str]
    # False when building the task needs what only the cluster may have (an engine binary): the
    # client's submit then leaves its data and reward checks to the driver.
    checked_at_submit: ClassVar[bool] = True
    # True when a sample is an episode with an environment (its result is its reward).
    episodic: ClassVar[bool] = False

    @classmethod
    def check_config(cls, cfg: ServiceConfig) -> str | None:
        """One line naming what in a run's config this task cannot use; None when all is well.

        Runs while the config is validated: no files are read here (that is `from_config`'s job).
        """
        return None

    @classmethod
    @abstractmethod
    def from_config(cls, cfg: ServiceConfig) -> Task:
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
