"""One sampler actor: the trainer's policy built in its own process, sampling steps under the
policy versions it is sent (`trainer.sampling.versioned.VersionedSampler`) and scoring them on the
reward pool as each micro-batch is decoded.

A thin shell: `ray.remote` is applied where the group starts it (`actors.sampling.group`), so the
class runs without Ray in a test.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from actors.pool.reward_pool import RewardPool
from actors.sampling.spec import SamplerSpec
from trainer.engine import Trainer
from trainer.policy import CharTokenizer, build_policy
from trainer.sampling.sampler_seam import SampledStep, StepRequest
from trainer.sampling.versioned import VersionedSampler


class SamplerWorker:
    """Decodes a rank's step shares with the policy versions it holds."""

    versioned_class: type[VersionedSampler] = VersionedSampler

    def __init__(self, spec: SamplerSpec) -> None:
        torch.set_num_threads(spec.torch_threads)
        self.spec = spec
        device = torch.device("cuda", torch.cuda.current_device()) if spec.use_gpu else torch.device("cpu")
        tokenizer = CharTokenizer(spec.alphabet) if spec.alphabet is not None else None
        policy = build_policy(spec.trainer, tokenizer, spec.prompt_format)
        # A trainer of its own: the policy decodes with the precision, attention and kernels a
        # trainer chooses for this device (no optimiser or reference is built until used: never).
        trainer = Trainer(
            spec.trainer, device=device, stop=spec.stop, policy=policy, reward_token_ids=spec.reward_token_ids
        )
        trainer.sampler.threads = spec.decode_threads
        self.versioned = self.versioned_class(trainer.model, trainer.sampler, spec.trainer.sampling)
        self._pool: RewardPool | None = None

    def ready(self) -> int:
        """Its process id, once built."""
        return os.getpid()

    def load(self, version: int, weights: Mapping[str, Tensor]) -> list[int]:
        """Keep the weights of `version`; returns the versions it holds."""
        self.versioned.load(version, weights)
        return self.versioned.held()

    def release(self, version: int) -> None:
        self.versioned.release(version)

    def sample(self, request: StepRequest) -> SampledStep:
        """A share of a step, sampled under its version and scored on the pool."""
        return self.versioned.sample(request, self.rewards())

    def rewards(self) -> Any:
        """This actor's client of the run's reward pool (attached on first use). The error-rate rule
        is the trainer's, over the whole step's items."""
        if self._pool is None:
            self._pool = RewardPool.attach(self.spec.pool, run_id=self.spec.run_id, enforce_error_rate=False)
        return self._pool
