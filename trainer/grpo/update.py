"""The optimisation of one GRPO step over its rollouts: `grpo.epochs` epochs of `grpo.minibatches`
optimiser steps each, every step accumulating gradients over the micro-batches it touches.

Old log-probs (the denominator of the importance ratio) are those of the policy that sampled, i.e.
the weights at the start of the step. With one mini-batch they come from the first epoch's own
forward (detached), so no extra forward is needed and the ratio is exactly 1 at the first step;
with several, a no-grad forward over every row precedes the first optimiser step. The sampler's own
log-probs (KV cache, autocast) differ from them only by numerics: their gap is the
`sampler_logprob_gap` metric, and the `tis` policy losses weight each token by min(exp(old - sampler), cap).
When the sampler ran older weights (`grpo.max_staleness`), the sampler's log-probs are the behaviour
policy and the old log-probs recomputed here the proximal one: the same weights then correct for
the lag (AReaL's decoupled loss). The step records the weights the loss applied to the kept tokens
(`is_weight_mean`, `is_weight_max`, `is_clip_frac`: 1, 1 and 0 for a loss that applies none).

The policy loss is the function `grpo.policy_loss` names in the registry (`trainer.grpo.policy_losses`),
looked up once here: the update hands it every micro-batch's tensors and never asks which variant it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from trainer.config import GRPOConfig
from trainer.distributed import all_reduce_sum
from trainer.grpo.dropout import dropout_disabled
from trainer.grpo.loss import PolicyLossTerms, aggregate_loss, loss_denominator
from trainer.grpo.minibatch import minibatch_rows, select_rows, split_by_rollout
from trainer.grpo.policy_losses import PolicyLossInputs, get_policy_loss
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
    "is_weight_mean": float("nan"),
    "is_weight_max": float("nan"),
    "is_clip_frac": float("nan"),
}


@dataclass(frozen=True)
class UpdateContext:
    """What an update needs from the trainer that runs it, and nothing more."""

    model: nn.Module  # the module to train through (the strategy's: DDP's wrapper or the sharded module)
    precision: Precision
    no_sync: Callable[[bool], AbstractContextManager]  # no_sync(True): accumulate without all-reduce
    world: int  # data-parallel ranks
    device: torch.device
    temperature: float  # the sampling temperature: log-probs are taken under it
    max_new_tokens: int  # the default normaliser of loss_agg='constant'
    shuffle_seed: int = 0  # seeds the order of this rank's rows in mini-batches
    shared_prefix: bool = False  # the model takes `shared_prefix` (`Policy.shared_prefix`)


def record_empty_update(metrics: DeviceMetrics, opt: GuardedOptimizer) -> None:
    """A step whose groups were all dropped: no optimiser step; the same keys as a real update."""
    for name, value in UPDATE_METRICS.items():
        metrics.add(name, value)
    metrics.add("consecutive_skips", opt.consecutive)


class _Part(NamedTuple):
    """One micro-batch of the step and its per-row inputs to the loss (on the device)."""

    rollout: Rollout
    advantages: Tensor  # [N_i]
    row_weight: Tensor  # [N_i] 1: the policy term counts this row
    kl_weight: Tensor  # [N_i] 1: the KL term counts this row
    ref: Tensor | None  # [N_i, L_i] reference log-probs, None without a KL term in the loss


def _take(t: Tensor | None, rows: Tensor | None) -> Tensor | None:
    return t if (t is None or rows is None) else t[rows.to(t.device)]


class GRPOUpdate:
    """`grpo.epochs` x `grpo.minibatches` optimiser steps over one step's micro-batches; sums stay on the device."""

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
        self.policy_loss = get_policy_loss(cfg.policy_loss)  # the one place a variant is chosen
        self.sizes = [r.num_rows for r in rollouts]
        split = [
            getattr(selection, f).to(ctx.device).split(self.sizes)
            for f in ("advantages", "row_weight", "kl_weight")
        ]
        refs = ref_logprobs if ref_logprobs is not None else [None] * len(rollouts)
        self.parts = [_Part(*p) for p in zip(rollouts, *split, refs, strict=True)]
        self.in_loss = (selection.row_weight > 0) | (selection.kl_weight > 0)  # [N] host
        self.old: list[Tensor | None] = [None] * len(rollouts)
        zero = torch.zeros((), device=ctx.device)
        names = (
            "kl",
            "kl_tokens",
            "clipped",
            "kept_tokens",
            "entropy",
            "tokens",
            "gap",
            "is",
            "is_cut",
            "is_max",
        )
        self.sums = {name: zero.clone() for name in names}

    def _record_old(self, i: int, logprobs: Tensor, entropy: Tensor) -> None:
        """Keep micro-batch i's old log-probs (the policy that sampled) and its entropy and gap sums."""
        rollout = self.parts[i].rollout
        self.old[i] = logprobs.detach()
        self.sums["entropy"] += entropy.detach().sum()  # 0 outside the mask
        self.sums["tokens"] += rollout.completion_mask.sum()
        self.sums["gap"] += (logprobs.detach() - rollout.old_logprobs).abs().sum()

    def _old_pass(self) -> None:
        """Old log-probs of every row before any optimiser step (needed once rows are shuffled)."""
        with torch.no_grad():
            for i, part in enumerate(self.parts):
                with self.ctx.precision.autocast():
                    logprobs, entropy = completion_logprobs(
                        self.ctx.model,
                        part.rollout,
                        self.ctx.temperature,
                        shared_prefix=self.ctx.shared_prefix,
                    )
                self._record_old(i, logprobs, entropy)

    def _denominators(self, rows: Sequence[Tensor | None]) -> Tensor:
        """[policy, KL] normalisers of one optimiser step, summed over micro-batches and ranks."""
        constant = self.cfg.loss_constant or self.ctx.max_new_tokens
        agg = self.cfg.loss_agg
        local = torch.zeros(2, device=self.ctx.device)
        for part, r in zip(self.parts, rows, strict=True):
            mask = _take(part.rollout.completion_mask, r)
            local[0] += loss_denominator(mask, _take(part.row_weight, r), agg, constant)
            local[1] += loss_denominator(mask, _take(part.kl_weight, r), agg, constant)
        return all_reduce_sum(local).clamp(min=1.0)

    def _micro_batch(self, i: int, rows: Tensor | None, denominators: Tensor) -> Tensor:
        """Forward and backward of micro-batch i's `rows` (None: all); returns its (detached) loss share."""
        ctx, cfg, part = self.ctx, self.cfg, self.parts[i]
        rollout = part.rollout if rows is None else select_rows(part.rollout, rows)
        mask = rollout.completion_mask
        with ctx.precision.autocast():  # the entropy is a metric of the old policy: the first forward only
            logprobs, entropy = completion_logprobs(
                ctx.model,
                rollout,
                ctx.temperature,
                entropy=self.old[i] is None,
                shared_prefix=ctx.shared_prefix,
            )
        if self.old[i] is None:  # one mini-batch: the first epoch's forward gives the old log-probs
            self._record_old(i, logprobs, entropy)
        row_weight, kl_weight = _take(part.row_weight, rows), _take(part.kl_weight, rows)
        inputs = PolicyLossInputs(
            logprobs=logprobs, old_logprobs=_take(self.old[i], rows), sampler_logprobs=rollout.old_logprobs,
            advantages=_take(part.advantages, rows), mask=mask, ref_logprobs=_take(part.ref, rows),
        )  # fmt: skip
        terms = self.policy_loss(inputs, cfg)
        loss = aggregate_loss(terms.pg, mask, row_weight, cfg.loss_agg, denominators[0])
        if part.ref is not None:
            loss = loss + cfg.beta * aggregate_loss(terms.kl, mask, kl_weight, cfg.loss_agg, denominators[1])
        # Both strategies average gradients over ranks: times the world size is the global sum / denominator.
        loss = loss * ctx.world
        ctx.precision.backward(loss)
        kept = mask & row_weight.bool().unsqueeze(1)
        kl_kept = mask & kl_weight.bool().unsqueeze(1)
        self.sums["kl"] += torch.where(kl_kept, terms.kl.detach(), 0.0).sum()
        self.sums["kl_tokens"] += kl_kept.sum()
        self.sums["clipped"] += (terms.clipped & kept).sum()
        self.sums["kept_tokens"] += kept.sum()
        self._importance_sums(terms, kept)
        return loss.detach()

    def _importance_sums(self, terms: PolicyLossTerms, kept: Tensor) -> None:
        """The importance weights the loss applied to the kept tokens (1 where it applies none)."""
        s = self.sums
        if terms.is_weights is None:
            s["is"] += kept.sum()
            s["is_max"] = torch.maximum(s["is_max"], kept.any().to(s["is_max"].dtype))
            return
        weights = torch.where(kept, terms.is_weights.detach(), 0.0)
        s["is"] += weights.sum()
        s["is_max"] = torch.maximum(s["is_max"], weights.max().to(s["is_max"].dtype))
        if terms.is_clipped is not None:
            s["is_cut"] += (terms.is_clipped & kept).sum()

    def _optimiser_step(self, rows: Tensor | None, metrics: DeviceMetrics):
        """One optimiser step over the step's `rows` (None: every row), accumulated per micro-batch."""
        ctx = self.ctx
        per_part = [None] * len(self.parts) if rows is None else split_by_rollout(rows, self.sizes)
        active = [i for i, r in enumerate(per_part) if r is None or r.numel()]
        denominators = self._denominators(per_part)
        self.opt.zero_grad()
        loss = torch.zeros((), device=ctx.device)
        for k, i in enumerate(active):
            with ctx.no_sync(k < len(active) - 1):
                loss = loss + self._micro_batch(i, per_part[i], denominators)
        result = self.opt.step(loss)
        metrics.add("loss", all_reduce_sum(loss.clone()) / ctx.world, mean=True)
        metrics.add("grad_norm", result.grad_norm, mean=True)
        metrics.add("skipped", result.skipped)
        return result

    def run(self, metrics: DeviceMetrics) -> None:
        """Every epoch's optimiser steps; adds UPDATE_METRICS and consecutive_skips to `metrics`."""
        cfg, ctx = self.cfg, self.ctx
        ctx.model.train()
        generator = torch.Generator().manual_seed(ctx.shuffle_seed)
        result = None
        with dropout_disabled(ctx.model):
            if cfg.minibatches > 1:
                self._old_pass()
            for _ in range(cfg.epochs):
                plan = (
                    [None]
                    if cfg.minibatches == 1
                    else minibatch_rows(self.in_loss, cfg.minibatches, generator)
                )
                for rows in plan:
                    result = self._optimiser_step(rows, metrics)
        s = self.sums
        metrics.add("kl", s["kl"] / s["kl_tokens"].clamp(min=1.0))
        metrics.add("clip_frac", s["clipped"] / s["kept_tokens"].clamp(min=1.0))
        metrics.add("entropy", s["entropy"] / s["tokens"].clamp(min=1.0))
        metrics.add("sampler_logprob_gap", s["gap"] / s["tokens"].clamp(min=1.0))
        metrics.add("is_weight_mean", s["is"] / s["kept_tokens"].clamp(min=1.0))
        metrics.add("is_weight_max", s["is_max"])
        metrics.add("is_clip_frac", s["is_cut"] / s["kept_tokens"].clamp(min=1.0))
        metrics.add("consecutive_skips", result.consecutive_skips)
