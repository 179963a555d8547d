"""What the trainer and a rank's run loop need of a task, as a protocol.

A task (the chess FEN task, the generic JSONL `text` task) lives in `service/tasks/`, where it
can bind its scorer from `rewards/`; the trainer sees only this side of it: the characters its
text is written in (the built-in tokenizer's alphabet), the strings that end a completion, an
endless stream of training pairs, and the held-out metrics it adds to the generic ones.
Implementations are plain picklable objects: they travel to every Ray Train worker inside the
loop's spec.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from trainer.data.pairs import Pair


class TrainingTask(Protocol):
    name: str

    @property
    def alphabet(self) -> str:
        """Every character a prompt or target of this task can hold."""
        ...

    @property
    def stop(self) -> tuple[str, ...]:
        """Strings that end a completion besides EOS (`trainer.sampling.stop`)."""
        ...

    def train_stream(self, file_pairs: Sequence[Pair] | None) -> Callable[[int], Pair]:
        """Training pair number i (a pure function of i): over `file_pairs` when the data came
        from a file, else the task's own generator."""
        ...

    def episode_host(self, pool_of: Callable[[], Any] | None = None) -> Any | None:
        """Where this rank's episodes run (`trainer.sampling.episodes.EpisodeHost`) for a task whose
        samples are episodes with an environment (pool_of: the rank's reward pool, attached when
        called); None for a task of one completion per sample."""
        ...

    def eval_metrics(self, scored: Sequence[Any]) -> dict[str, float]:
        """Task-specific held-out figures from the scorer's results (added to exact match,
        valid rate and mean reward)."""
        ...
