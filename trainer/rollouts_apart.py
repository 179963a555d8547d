"""A GRPO step's samples from samplers apart from the trainer, requested up to `grpo.max_staleness`
steps ahead (`sampling.placement: actors`).

At GRPO step s (the policy version s: s updates taken) a rank
  1. publishes version s's trainable weights to its samplers (once; `SamplerApart.publish`),
  2. requests step s's batch under version s if it is not on its way already, and the batches of
     steps s+1 .. s+max_staleness under version s,
  3. receives step s's batch (completions, the sampler's log-probs, the rewards) and trains on it.
So at max_staleness 0 a step samples with the weights it updates, as the trainer's own sampler
does, and at 1 the samplers generate batch s+1 with the weights of step s while the trainer updates
on batch s (sampled under version s-1). Each row's noise is keyed by its step, not by the version
that samples it, so a batch is the same tokens wherever and whenever it is sampled under the same
weights. A batch that lags the weights it would train by more than max_staleness is never trained
on: it is sampled again under the current weights.

The samplers report a digest of the weights they generated with; it must be the digest of what was
published for that version (`WeightsMismatch` otherwise). A checkpoint holds the steps on their
way and the weights they are sampled under (`state_dict`), so a resumed run requests the same
batches under the same weights and trains on what a run that never stopped would have.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from trainer.grpo.reward_source import Rewards, RewardSource
from trainer.progress import Progress
from trainer.sampling.rollout import Rollout
from trainer.sampling.sampler_seam import SampledStep, SamplerApart, StepRequest


class WeightsMismatch(RuntimeError):
    """A sampler generated with other weights than the trainer published for the version it was asked for."""


class RolloutsApart:
    """A rank's GRPO samples from `sampler` (its samplers apart), up to `max_staleness` steps ahead."""

    def __init__(
        self,
        sampler: SamplerApart,
        max_staleness: int,
        progress: Progress,
        weights: Callable[[], dict[str, Tensor]],
        *,
        rank: int = 0,
        world: int = 1,
        device: torch.device | str = "cpu",
        local_share: Callable[[Sequence[Any]], list[Any]] = list,
    ) -> None:
        """weights(): the policy's trainable weights as CPU copies (every rank calls it at the same
        point); local_share(pairs): this rank's contiguous share of a step's pairs."""
        self.sampler = sampler
        self.max_staleness = max_staleness
        self.progress = progress
        self.weights = weights
        self.rank, self.world = rank, world
        self.device = torch.device(device)
        self.local_share = local_share
        self.pairs_of: Callable[[int], Sequence[Any]] | None = None  # GRPO step -> its pairs (all ranks')
        self.total = 0  # GRPO steps of the run: nothing is requested past the last
        self.in_flight: dict[int, int] = {}  # step -> the version it was requested under
        self.digests: dict[int, str] = {}  # version -> the digest of what was published
        self.kept: dict[
            int, dict[str, Tensor]
        ] = {}  # version -> its weights, while a batch on its way needs them
        self._resume: list[tuple[int, int]] = []  # (step, version) to request again after a restore
        self._restored: dict[int, dict[str, Tensor]] = {}
        self._record: dict[str, float] = {}
        self.failure_reasons: list[str] = []  # the last step's first failed-reward reasons

    def plan(self, pairs_of: Callable[[int], Sequence[Any]], total: int) -> None:
        """pairs_of(t): GRPO step t's pairs (every rank the same list); total: the run's GRPO steps."""
        self.pairs_of, self.total = pairs_of, total

    # ----------------------------------------------------------------- RolloutSource
    def sample(
        self, pairs: Sequence[Any], rewards: RewardSource | None, first_index: int = 0
    ) -> tuple[list[Rollout], list[Any]]:
        """This step's rollouts (this rank's share `pairs`) and its rewards as the one ticket; the
        samplers already scored them (`rewards` is theirs to use, not this rank's)."""
        step = version = self.progress.grpo_steps
        self._request_restored()
        self._publish(version, None)
        if step not in self.in_flight:
            self._request(step, version, pairs, first_index)
        for ahead in range(step + 1, min(step + self.max_staleness, self.total - 1) + 1):
            if ahead not in self.in_flight:
                share = self._share_of(ahead)
                self._request(ahead, version, share, self.rank * len(share))
        got = self._receive(step)
        if version - got.version > self.max_staleness:  # never trained on: sampled again, now
            self._request(step, version, pairs, first_index)
            got = self._receive(step)
        self._record = {"policy_version": float(got.version), "staleness": float(version - got.version)}
        self.failure_reasons = list(got.failure_reasons)
        self._release_unneeded(version)
        return [_to(r, self.device) for r in got.rollouts], [got.rewards]

    def collect(self, rewards: RewardSource | None, tickets: Sequence[Any]) -> Rewards:
        return Rewards.concat(list(tickets))

    def record(self) -> dict[str, float]:
        return dict(self._record)

    def state_dict(self) -> dict[str, Any]:
        """The steps on their way and the weights they are sampled under; empty when none are."""
        if not self.in_flight:
            return {}
        steps = sorted(self.in_flight.items())
        return {
            "in_flight": [[step, version] for step, version in steps],
            "weights": {version: self.kept[version] for version in sorted({v for _, v in steps})},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Request the checkpoint's steps again, under their weights, before the next step."""
        if not state:
            return
        self._resume = [(int(step), int(version)) for step, version in state["in_flight"]]
        self._restored = {int(v): dict(w) for v, w in state["weights"].items()}

    # ----------------------------------------------------------------- pieces
    def _share_of(self, step: int) -> list[Any]:
        if self.pairs_of is None:
            raise RuntimeError("sampling ahead needs the run's steps (RolloutsApart.plan)")
        return self.local_share(self.pairs_of(step))

    def _publish(self, version: int, weights: dict[str, Tensor] | None) -> None:
        if version in self.digests:
            return
        weights = self.weights() if weights is None else weights
        self.digests[version] = self.sampler.publish(version, weights)
        if self.max_staleness:  # a checkpoint may need them while a batch sampled under them is on its way
            self.kept[version] = weights

    def _request(self, step: int, version: int, pairs: Sequence[Any], first_index: int) -> None:
        self.sampler.request(StepRequest(step, version, list(pairs), first_index))
        self.in_flight[step] = version

    def _request_restored(self) -> None:
        for step, version in self._resume:
            self._publish(version, self._restored[version])
            share = self._share_of(step)
            self._request(step, version, share, self.rank * len(share))
        self._resume, self._restored = [], {}

    def _receive(self, step: int) -> SampledStep:
        got = self.sampler.receive(step)
        version = self.in_flight.pop(step)
        published = self.digests.get(version)
        if got.step != step or got.version != version:
            raise WeightsMismatch(
                f"asked the samplers for step {step} under policy version {version}, got step {got.step} "
                f"under version {got.version}"
            )
        if got.digest != published:
            raise WeightsMismatch(
                f"sampler weights mismatch at GRPO step {step + 1}: the batch was sampled with weights of "
                f"digest {got.digest[:16]}, but policy version {version} was published as {str(published)[:16]}"
            )
        return got

    def _release_unneeded(self, current: int) -> None:
        needed = {current, *self.in_flight.values()}
        for version in [v for v in self.digests if v not in needed]:
            self.sampler.release(version)
            del self.digests[version]
            self.kept.pop(version, None)


def _to(rollout: Rollout, device: torch.device) -> Rollout:
    return Rollout(*(x.to(device) if isinstance(x, Tensor) else x for x in rollout))
