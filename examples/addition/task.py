"""Multi-digit addition as a task of its own: its keys, its data, its reward and its figures in one
module (docs/guides/adding-a-task.md walks through it).

    cp examples/addition/task.py service/tasks/addition.py      # registered as task.name: addition
    python -m service.train --config examples/addition/task.yaml

The registry finds every module of `service/tasks/` that defines a `Task` with a `config_class`; the
task's name is its config's `name`. No data file: the problems are generated from the run's seeds,
the held-out ones never trained on.

- Keys: `task.digits` (the most digits of an operand), `task.near_miss_weight`.
- A pair: prompt "47+85=", target "132".
- Reward: one component, `DigitsRight`: 1 for the sum, `near_miss_weight` x the share of digits
  right (compared from the units up) for another plain number, and 0 with status `unparsable` for
  anything else; the user rewards of `reward.user` add on top, as for every task.
- Held-out figure: `digits_right_mean`, the mean share of digits right.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from pydantic import Field

from rewards import RewardConfig, Scorer
from rewards.result import UNPARSABLE
from rewards.scorer import Part, RewardComponent
from service.preflight.data import FitLimits, check_records
from service.tasks.base import RunSections, Task, TaskConfigBase
from trainer.data.pairs import Pair


class AdditionTaskConfig(TaskConfigBase):
    """`name: addition`: "a+b=" -> the sum, generated from the run's seeds."""

    name: Literal["addition"] = Field("addition", description="addition: 'a+b=' -> the sum, generated")
    digits: int = Field(2, ge=1, le=9, description="most digits of an operand (each length equally likely)")
    near_miss_weight: float = Field(
        0.5, ge=0.0, le=1.0, description="reward of a wrong number, times its share of digits right"
    )


class DigitsRight(RewardComponent):
    """`digits_right`: the share of the target's digits the completion has right, units with units."""

    name = "digits_right"
    needs_target = True

    def __init__(self, near_miss_weight: float):
        self.near_miss_weight = near_miss_weight

    def judge(self, completion: str, target: Any, fields: Any) -> Part:
        if completion == target:
            return Part({"digits_right": 1.0}, 1.0)
        if not (completion.isascii() and completion.isdigit()):
            return Part({"digits_right": 0.0}, 0.0, UNPARSABLE)
        width = max(len(completion), len(target))
        got, want = completion.rjust(width), target.rjust(width)
        share = sum(g == w for g, w in zip(got, want, strict=True)) / width
        return Part({"digits_right": share}, self.near_miss_weight * share)


def operand(rng: random.Random, digits: int) -> int:
    """A number of 1..digits digits, each length equally likely (so short sums are not rare)."""
    length = rng.randint(1, digits)
    return rng.randint(0 if length == 1 else 10 ** (length - 1), 10**length - 1)


def problem(rng: random.Random, digits: int) -> Pair:
    a, b = operand(rng, digits), operand(rng, digits)
    return Pair(f"{a}+{b}=", str(a + b))


@dataclass(frozen=True)
class AdditionTask(Task):
    config_class = AdditionTaskConfig

    section: AdditionTaskConfig
    reward: RewardConfig
    seed: int
    eval_seed: int
    eval_size: int

    @classmethod
    def from_config(cls, cfg: RunSections) -> AdditionTask:
        """The task; ValueError (one line) when the held-out problems cannot be drawn or do not fit."""
        d = cfg.data
        task = cls(cfg.task, cfg.reward, d.seed, d.eval_seed, d.eval_size)
        possible = (10**cfg.task.digits) ** 2
        if d.eval_size > possible // 2:
            raise ValueError(
                f"data.eval_size: {d.eval_size} is more than half of the {possible} possible problems"
            )
        located = ((f"held-out problem {i}", p.prompt, p.target) for i, p in enumerate(task.eval_pairs()))
        check_records("task.digits", located, FitLimits.of(cfg), task.alphabet, train=False)
        return task

    @property
    def alphabet(self) -> str:
        return "0123456789+="

    @cached_property
    def _held_out(self) -> list[Pair]:
        rng, pairs, seen = random.Random(f"held-out:{self.eval_seed}"), [], set()
        while len(pairs) < self.eval_size:
            pair = problem(rng, self.section.digits)
            if pair.prompt not in seen:
                seen.add(pair.prompt)
                pairs.append(pair)
        return pairs

    def eval_pairs(self) -> list[Pair]:
        return list(self._held_out)

    def training_pairs(self, log: Callable[[str], None]) -> None:
        return None  # generated: no file to load

    def train_stream(self, file_pairs: Sequence[Pair] | None) -> Callable[[int], Pair]:
        """Problem i of the training stream: drawn from (data.seed, i), never a held-out prompt."""
        held = {p.prompt for p in self._held_out}
        digits, seed = self.section.digits, self.seed

        def at(i: int) -> Pair:
            rng = random.Random(f"train:{seed}:{i}")
            while (pair := problem(rng, digits)).prompt in held:
                pass
            return pair

        return at

    def scorer(self) -> Scorer:
        return Scorer([(DigitsRight(self.section.near_miss_weight), 1.0)], self.reward, data_source=self.name)

    def eval_metrics(self, scored: Sequence[Any]) -> dict[str, float]:
        shares = [r.components.get("digits_right", 0.0) for r in scored]
        return {"digits_right_mean": sum(shares) / len(shares)} if shares else {}
