"""A scorer as in-process rewards with statuses, for the bench's steps that need no pool (no Ray)."""

from __future__ import annotations

from rewards import USABLE_STATUSES, Scorer
from trainer.grpo.reward_source import Rewards


def scorer_rewards(scorer: Scorer):
    """`scorer` as a `ScoreFn` returning `Rewards` with statuses (for InlineRewards)."""

    def score(completions: list[str], targets: list[str]) -> Rewards:
        results = scorer.score_batch(completions, targets)
        return Rewards(
            values=[r.total for r in results],
            usable=[r.status in USABLE_STATUSES for r in results],
            statuses=[r.status for r in results],
        )

    return score
