"""The service's view of a task: the trainer's side (`trainer.task.TrainingTask`) plus what only
the driver needs: the held-out pairs, the training file, and the scorer the reward pool runs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from rewards import Scorer
from trainer.data.pairs import Pair

if TYPE_CHECKING:
    from service.config import ServiceConfig


class Task(ABC):
    """One task; subclasses register under `name` (see `service.tasks.TASKS`)."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def from_config(cls, cfg: ServiceConfig) -> Task:
        """The task for a run's config (each task reads the sections it needs)."""

    @property
    @abstractmethod
    def alphabet(self) -> str: ...

    @abstractmethod
    def eval_pairs(self) -> list[Pair]:
        """The held-out pairs (deterministic; disjoint from training). ValueError when impossible."""

    @abstractmethod
    def training_pairs(self, log: Callable[[str], None]) -> list[Pair] | None:
        """The pairs of a training file, held-out ones removed; None when the task generates its own."""

    @abstractmethod
    def train_stream(self, file_pairs: Sequence[Pair] | None) -> Callable[[int], Pair]: ...

    @abstractmethod
    def scorer(self) -> Scorer:
        """The scorer the reward pool runs for this task (user rewards included)."""

    def eval_metrics(self, scored: Sequence[Any]) -> dict[str, float]:
        return {}
