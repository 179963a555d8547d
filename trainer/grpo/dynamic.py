"""Dynamic sampling (DAPO): when dropped groups (zero variance, unusable or skipped rewards) leave a
step with fewer groups that carry a learning signal than it asked for, sample more prompts.

Each extra round samples another batch of the step's size, from a region of the data stream kept
for it (so a resumed run draws the same ones), until the step has at least its number of groups
with a signal or `grpo.dynamic_sampling_tries` rounds were drawn. Every rank takes part in every
round (the count of groups is summed over ranks, so they agree on when to stop).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor

from trainer.grpo.reward_source import Rewards
from trainer.sampling.rollout import Rollout


@dataclass(frozen=True)
class Batch:
    """A step's sampled rows so far: rollouts, their rewards and reference log-probs (in row order)."""

    rollouts: list[Rollout]
    scored: Rewards
    ref: list[Tensor] | None
    prompts: list[str] = field(default_factory=list)  # each group's prompt text, in group order

    def __add__(self, other: Batch) -> Batch:
        ref = None if self.ref is None or other.ref is None else self.ref + other.ref
        scored = Rewards.concat([self.scored, other.scored])
        return Batch(self.rollouts + other.rollouts, scored, ref, self.prompts + other.prompts)


def fill_batch(
    batch: Batch,
    wanted_groups: int,
    tries: int,
    draw: Callable[[int], Batch],
    groups_with_signal: Callable[[Batch], int],
) -> tuple[Batch, int, int]:
    """(the batch with extra rounds, rounds drawn, groups with a signal over all ranks).

    draw(t): round t's rollouts (sampled, scored, with reference log-probs); groups_with_signal:
    the global count of groups left in the policy term (a collective: every rank calls it).
    """
    rounds = 0
    kept = groups_with_signal(batch)
    while kept < wanted_groups and rounds < tries:
        batch = batch + draw(rounds)
        rounds += 1
        kept = groups_with_signal(batch)
    return batch, rounds, kept
