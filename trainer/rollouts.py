"""A GRPO step's samples on one rank, handed to the rewards as they are decoded.

The step's prompts are cut into micro-batches of sampling.prompts_per_microbatch; each goes to the
`Sampler` (`trainer.sampling.sampler_seam`) under the current policy version, and its completions
are submitted to the reward source at once, so scoring runs while the next micro-batch decodes.
With an environment every sample is an episode, whose result is its reward: nothing is submitted.

The trainer takes a step's samples from a `RolloutSource`: `Rollouts` here (its own sampler), or
`trainer.rollouts_apart.RolloutsApart` (samplers apart from it, steps ahead).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from trainer.config import SamplingConfig
from trainer.data.pairs import row_fields
from trainer.grpo.episode_rewards import episode_rewards
from trainer.grpo.reward_source import Rewards, RewardSource
from trainer.progress import Progress
from trainer.sampling.rollout import Rollout
from trainer.sampling.sampler_seam import PromptBatch, Sampler


class RolloutSource(Protocol):
    """Where a trainer's GRPO step takes its samples and their rewards from."""

    def sample(
        self, pairs: Sequence[Any], rewards: RewardSource | None, first_index: int = 0
    ) -> tuple[list[Rollout], list[Any]]:
        """This rank's rollouts of `pairs` (prompts first_index, ... of the step) and reward tickets."""
        ...

    def collect(self, rewards: RewardSource | None, tickets: Sequence[Any]) -> Rewards:
        """The step's rewards in row order."""
        ...

    def record(self) -> dict[str, float]:
        """The last sample's `policy_version` (of the weights that sampled) and `staleness`."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What an exact resume needs of the samples in flight (empty when none are)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Rollouts:
    """Samples a step's prompts through `sampler` and hands the completions to the rewards."""

    def __init__(self, sampler: Sampler, cfg: SamplingConfig, progress: Progress) -> None:
        """progress: the trainer's step counts; its GRPO steps are the policy version sampled."""
        self.sampler = sampler
        self.cfg = cfg
        self.progress = progress
        self._version = 0

    def sample(
        self,
        pairs: Sequence[Any],
        rewards: RewardSource | None,
        first_index: int = 0,
        *,
        version: int | None = None,
        step: int | None = None,
    ) -> tuple[list[Rollout], list[Any]]:
        """Each micro-batch's rollout and its reward ticket (an episode batch's `Rewards`).

        Row r of prompt i (pairs[i] is prompt first_index + i of the step) draws its own noise,
        keyed by (seed, GRPO step, first_index + i, r): the tokens do not depend on the micro-batch
        size or the number of ranks (`trainer.sampling.row_noise`). version: the policy version the
        sampler holds (default: the trainer's GRPO steps); step: the step keying the noise (default:
        the version), which a sampler apart from the trainer gives when it samples ahead.
        """
        version = self.progress.grpo_steps if version is None else version
        self._version = version
        chunks = self._microbatches(pairs)
        batches = [PromptBatch.of(chunk, first_index + start, step) for start, chunk in chunks]
        if self.sampler.episodes is not None:
            outs = self.sampler.play(batches, version)
            return [o.rollout for o in outs], [episode_rewards(o.results, o.env_wait_s) for o in outs]
        if rewards is None:
            raise ValueError("sampling without an environment needs a reward source")
        k = self.cfg.group_size
        rollouts, tickets = [], []
        for (_, chunk), batch in zip(chunks, batches, strict=True):
            done = self.sampler.sample(batch, version)
            targets = [p.target for p in chunk for _ in range(k)]
            fields = row_fields(chunk, k, done.token_ids)
            tickets.append(rewards.submit(done.texts, targets, fields=fields))
            rollouts.append(done.rollout)
        return rollouts, tickets

    def collect(self, rewards: RewardSource | None, tickets: Sequence[Any]) -> Rewards:
        """The step's rewards in row order: the tickets collected, or the episodes' own."""
        if self.sampler.episodes is not None:
            return Rewards.concat(tickets)
        if rewards is None:
            raise ValueError("collecting rewards needs the reward source they were submitted to")
        return rewards.collect(tickets)

    def record(self) -> dict[str, float]:
        """The live weights sample each step: version the trainer's, staleness 0."""
        return {"policy_version": float(self._version), "staleness": 0.0}

    def state_dict(self) -> dict[str, Any]:
        return {}  # nothing is sampled between steps

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(
                "the checkpoint holds batches sampled ahead by sampler actors; resume it with "
                "sampling.placement=actors"
            )

    def _microbatches(self, pairs: Sequence[Any]) -> list[tuple[int, Sequence[Any]]]:
        """(offset in `pairs`, its micro-batch) of sampling.prompts_per_microbatch prompts each."""
        size = self.cfg.prompts_per_microbatch
        return [(start, pairs[start : start + size]) for start in range(0, len(pairs), size)]
