"""A sampler's side of sampling apart from the trainer: it holds the weights of the policy versions
it was sent, and samples a step's batch under the version the request names.

The weights of a version are copied into the policy when a request needs them (at most once per
version and request order), and the digest it reports is computed from the policy's own weights
after the copy: a sampler that kept older weights, or only part of the new ones, reports another
digest than the trainer published, and the trainer stops (`trainer.rollouts_apart`). A batch's
rewards are submitted as each micro-batch is decoded (`trainer.rollouts.Rollouts`), so scoring
overlaps sampling here as it does in the trainer.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from trainer.config import SamplingConfig
from trainer.grpo.reward_source import RewardSource
from trainer.progress import Progress
from trainer.rollouts import Rollouts
from trainer.sampling.rollout import Rollout
from trainer.sampling.sampler_seam import SampledStep, Sampler, StepRequest
from trainer.sampling.weights_digest import load_weights, module_weights, weights_digest


class VersionedSampler:
    """Samples steps under the versions it holds, with `sampler` decoding `module`'s weights."""

    def __init__(self, module: nn.Module, sampler: Sampler, cfg: SamplingConfig) -> None:
        self.module = module
        self.rollouts = Rollouts(sampler, cfg, Progress())
        self.versions: dict[int, dict[str, Tensor]] = {}  # version -> its trainable weights (CPU)
        self.loaded: int | None = None  # the version in the module now
        self.digest: str | None = None  # of the module's trainable weights as they are now

    def load(self, version: int, weights: Mapping[str, Tensor]) -> None:
        """Keep the weights of `version` until released (copied in when a request needs them)."""
        self.versions[version] = dict(weights)
        if self.loaded == version:  # the same version sent again (a resumed run): copy it in again
            self.loaded = None

    def release(self, version: int) -> None:
        self.versions.pop(version, None)

    def held(self) -> list[int]:
        return sorted(self.versions)

    def sample(self, request: StepRequest, rewards: RewardSource) -> SampledStep:
        """The request's pairs sampled under its version, scored through `rewards`."""
        self._switch(request.version)
        rollouts, tickets = self.rollouts.sample(
            request.pairs, rewards, request.first_index, version=request.version, step=request.step
        )
        scored = self.rollouts.collect(rewards, tickets)
        reasons = list(getattr(rewards, "failure_reasons", None) or [])
        cpu = [Rollout(*(x.cpu() if isinstance(x, Tensor) else x for x in r)) for r in rollouts]
        return SampledStep(request.step, request.version, str(self.digest), cpu, scored, reasons)

    def _switch(self, version: int) -> None:
        if self.loaded == version:
            return
        if version not in self.versions:
            raise KeyError(
                f"the sampler holds no weights of policy version {version} (it holds {self.held()})"
            )
        self.copy_in(self.versions[version])
        self.loaded = version
        self.digest = weights_digest(module_weights(self.module))

    def copy_in(self, weights: Mapping[str, Tensor]) -> None:
        """Copy a version's weights into the policy (one place, so a test can make it fail)."""
        load_weights(self.module, weights)
