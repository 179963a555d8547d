"""The optimisation passes of one GRPO step over its rollouts (gradient accumulation per micro-batch).

The old policy of the importance ratio is the policy at the start of the step: its log-probs are
taken from the first pass's own forward (detached), so no extra forward is needed and the ratio is
exactly 1 on the first pass, whatever the sampler's numerics (KV cache, autocast) did. The
sampler's log-probs are only compared with it, as the `sampler_logprob_gap` metric.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from trainer.config import GRPOConfig
from trainer.distributed import all_reduce_sum
from trainer.grpo.loss import aggregate_loss, loss_denominator, policy_loss_terms
from trainer.grpo.selection import GroupSelection
from trainer.metrics import DeviceMetrics
from trainer.optim import GuardedOptimizer
from trainer.precision import Precision
from trainer.sampling.logprobs import completion_logprobs
from trainer.sampling.rollout import Rollout

# Every metric an update reports, with its value when no update ran (every group dropped): the
# one list both paths use, so a step's record has the same keys whether or not it learned.
UPDATE_METRICS: dict[str, float] = {
    "loss": 0.0,
    "kl": 0.0,
    "clip_frac": 0.0,
    "grad_norm": 0.0,
    "skipped": 0.0,
    "entropy": float("nan"),
    "sampler_logprob_gap": float("nan"),
}


@dataclass(frozen=True)
class UpdateContext:
    """What an update needs from the trainer that runs it, and nothing more."""

    model: nn.Module  # the module to train through (DDP and/or torch.compile wrapper)
    precision: Precision
    no_sync: Callable[[bool], AbstractContextManager]  # no_sync(True): accumulate without all-reduce
    world: int  # data-parallel ranks
    device: torch.device
    temperature: float  # the sampling temperature: log-probs are taken under it
    max_new_tokens: int  # the default normaliser of loss_agg='constant'


def record_empty_update(metrics: DeviceMetrics, opt: GuardedOptimizer) -> None:
    """A step whose groups were all dropped: no optimiser step; the same keys as a real update."""
    for name, value in UPDATE_METRICS.items():
        metrics.add(name, value)
    metrics.add("consecutive_skips", opt.consecutive)


class GRPOUpdate:
    """`grpo.passes` optimiser steps over one step's micro-batches; sums stay on the device."""

    def __init__(
        self,
        ctx: UpdateContext,
        cfg: GRPOConfig,
        opt: GuardedOptimizer,
        rollouts: Sequence[Rollout],
        selection: GroupSelection,
        ref_logprobs: Sequence[Tensor] | None,
    ) -> None:
        self.ctx, self.opt, self.cfg = ctx, opt, cfg
        device = ctx.device
        sizes = [r.num_rows for r in rollouts]
        advantages = selection.advantages.to(device).split(sizes)  # M x [N_i]
        row_weight = selection.row_weight.to(device).split(sizes)  # M x [N_i]
        refs = ref_logprobs if ref_logprobs is not None else [None] * len(rollouts)
        self.parts = list(zip(rollouts, advantages, row_weight, refs, strict=True))
        self.old: list[Tensor | None] = [None] * len(rollouts)
        zero = torch.zeros((), device=device)
        self.sums = {
            name: zero.clone() for name in ("kl", "clipped", "kept_tokens", "entropy", "tokens", "gap")
        }

    def _denominator(self) -> Tensor:
        """The loss normaliser summed over micro-batches and ranks (a device scalar, no host sync)."""
        constant = self.cfg.loss_constant or self.ctx.max_new_tokens
        local = sum(
            loss_denominator(r.completion_mask, w, self.cfg.loss_agg, constant) for r, _, w, _ in self.parts
        )
        return all_reduce_sum(local).clamp(min=1.0)

    def _micro_batch(self, i: int, first_pass: bool, denominator: Tensor) -> Tensor:
        """Forward and backward of micro-batch i; returns its (detached) share of the loss."""
        ctx = self.ctx
        rollout, advantages, row_weight, ref = self.parts[i]
        mask = rollout.completion_mask
        with ctx.precision.autocast():
            logprobs, entropy = completion_logprobs(ctx.model, rollout, ctx.temperature)
        if first_pass:
            self.old[i] = logprobs.detach()
            self.sums["entropy"] += entropy.detach().sum()  # 0 outside the mask
            self.sums["tokens"] += mask.sum()
            self.sums["gap"] += (logprobs.detach() - rollout.old_logprobs).abs().sum()
        terms = policy_loss_terms(
            logprobs, self.old[i], advantages, mask, self.cfg.clip_low, self.cfg.clip_high, ref, self.cfg.beta
        )
        # DDP averages gradients over ranks: multiply by the world size to get the global sum / denominator.
        loss = aggregate_loss(terms.loss, mask, row_weight, self.cfg.loss_agg, denominator) * ctx.world
        ctx.precision.backward(loss)
        kept = mask & row_weight.bool().unsqueeze(1)
        self.sums["kl"] += torch.where(kept, terms.kl, 0.0).sum()
        self.sums["clipped"] += (terms.clipped & kept).sum()
        self.sums["kept_tokens"] += kept.sum()
        return loss.detach()

    def run(self, metrics: DeviceMetrics) -> None:
        """All passes; adds UPDATE_METRICS and consecutive_skips to `metrics`."""
        ctx = self.ctx
        denominator = self._denominator()
        ctx.model.train()
        last = len(self.parts) - 1
        result = None
        for p in range(self.cfg.passes):
            self.opt.zero_grad()
            loss = torch.zeros((), device=ctx.device)
            for i in range(len(self.parts)):
                with ctx.no_sync(i < last):
                    loss = loss + self._micro_batch(i, p == 0, denominator)
            result = self.opt.step(loss)
            metrics.add("loss", all_reduce_sum(loss.clone()) / ctx.world, mean=True)
            metrics.add("grad_norm", result.grad_norm, mean=True)
            metrics.add("skipped", result.skipped)
        s = self.sums
        kept = s["kept_tokens"].clamp(min=1.0)
        tokens = s["tokens"].clamp(min=1.0)
        metrics.add("kl", s["kl"] / kept)
        metrics.add("clip_frac", s["clipped"] / kept)
        metrics.add("entropy", s["entropy"] / tokens)
        metrics.add("sampler_logprob_gap", s["gap"] / tokens)
        metrics.add("consecutive_skips", result.consecutive_skips)
