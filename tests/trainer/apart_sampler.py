"""A `SamplerApart` in this process, for the pure tests of sampling apart: a copy of the trainer's
policy behind a `VersionedSampler`, scoring inline. It samples a request when it is received (when
does not matter here: which weights sample a step does)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping

from torch import Tensor

from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.sampling.in_process import InProcessSampler
from trainer.sampling.sampler_seam import SampledStep, StepRequest
from trainer.sampling.versioned import VersionedSampler
from trainer.sampling.weights_digest import weights_digest


class StaleCopy(VersionedSampler):
    """A sampler that keeps the weights it holds from version `from_version` on (they never reach
    its policy): the fault the digest check is there to catch."""

    from_version = 1

    def copy_in(self, weights: Mapping[str, Tensor]) -> None:
        if self.loaded is None or self.loaded < self.from_version - 1:
            super().copy_in(weights)


class InProcessApart:
    """Implements `trainer.sampling.sampler_seam.SamplerApart` over a copy of `trainer`'s policy."""

    def __init__(
        self, trainer: Trainer, score: Callable, versioned: type[VersionedSampler] = VersionedSampler
    ):
        cfg = trainer.cfg
        policy = copy.deepcopy(trainer.policy)
        inner = InProcessSampler(policy, cfg.sampling, trainer.sampling_precision, cfg.seed, trainer.device)
        self.versioned = versioned(policy.module, inner, cfg.sampling)
        self.rewards = InlineRewards(score)
        self.requests: list[StepRequest] = []
        self.pending: dict[int, StepRequest] = {}
        self.published: list[int] = []
        self.released: list[int] = []
        self.received: dict[int, SampledStep] = {}  # step -> what it sent back

    def publish(self, version: int, weights: Mapping[str, Tensor]) -> str:
        self.published.append(version)
        self.versioned.load(version, weights)
        return weights_digest(weights)

    def release(self, version: int) -> None:
        self.released.append(version)
        self.versioned.release(version)

    def request(self, request: StepRequest) -> None:
        self.requests.append(request)
        self.pending[request.step] = request

    def receive(self, step: int) -> SampledStep:
        self.received[step] = self.versioned.sample(self.pending.pop(step), self.rewards)
        return self.received[step]
