"""The GRPO objective as pure functions: the clipped surrogate, k3 KL, aggregation.

Layout everywhere: N = G*K rows, group after group (prompt g owns rows g*K .. g*K+K-1); L is the
completion length. Nothing here moves data to the host: every result is a tensor.
"""

from __future__ import annotations

from typing import NamedTuple, get_args

import torch
from torch import Tensor

from trainer.config import LossAgg

_AGGS = get_args(LossAgg)


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(policy || reference): exp(r) - r - 1 with r = ref - logp.

    Shapes `[N, L]` in, `[N, L]` out. Always >= 0, exactly 0 where the two log-probs are equal,
    unbiased for the KL under samples of the policy (Schulman, "Approximating KL divergence").
    """
    r = ref_logprobs - logprobs
    return torch.expm1(r) - r  # expm1: exact near r = 0, where exp(r) - 1 would lose digits


class PolicyLossTerms(NamedTuple):
    """Per-token terms `[N, L]`; masked positions hold 0 (never NaN or inf from padding)."""

    loss: Tensor  # clipped surrogate loss (+ beta * kl)
    kl: Tensor  # k3 KL to the reference (zeros when there is none)
    clipped: Tensor  # bool: the clipped branch was taken, so this token's policy gradient is 0


def policy_loss_terms(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    ref_logprobs: Tensor | None = None,
    beta: float = 0.0,
) -> PolicyLossTerms:
    """Per-token PPO-clip loss with asymmetric clipping and an optional k3 KL penalty.

    logprobs, old_logprobs, ref_logprobs `[N, L]` (old and ref carry no gradient); advantages `[N]`;
    mask `[N, L]` bool, the tokens that take part. With ratio = exp(logp - old_logp):
    loss = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A) + beta * k3(logp, ref).
    """
    if logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and "
            f"mask {tuple(mask.shape)} must have the same [N, L] shape"
        )
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must be [N] = [{logprobs.shape[0]}], got {tuple(advantages.shape)}")
    if beta > 0 and ref_logprobs is None:
        raise ValueError("beta > 0 needs ref_logprobs")
    if not 0 <= clip_low < 1 or clip_high < 0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    mask = mask.bool()
    # Masked positions may hold anything (padding logits). Replace them BEFORE any arithmetic: a
    # where() after exp() would still send 0 * inf = NaN into the gradient.
    logprobs = torch.where(mask, logprobs, 0.0)
    log_ratio = torch.where(mask, logprobs - old_logprobs.detach(), 0.0)
    ratio = torch.exp(log_ratio)
    adv = advantages.detach().unsqueeze(1).to(ratio.dtype)  # [N, 1]
    unclipped = ratio * adv
    clipped_obj = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    surrogate = torch.minimum(unclipped, clipped_obj)
    clipped = mask & (clipped_obj < unclipped)
    loss = -surrogate
    if ref_logprobs is not None and beta > 0:
        kl = k3_kl(logprobs, torch.where(mask, ref_logprobs.detach(), 0.0))
        loss = loss + beta * kl
    else:
        kl = torch.zeros_like(loss)
    return PolicyLossTerms(loss=torch.where(mask, loss, 0.0), kl=kl.detach(), clipped=clipped)


def token_weights(mask: Tensor, loss_agg: LossAgg) -> Tensor:
    """`[N, L]` float weights so that the loss is sum(weights * per_token_loss) / loss_denominator.

    "token" and "constant": 1 on each counted token. "sequence": 1 / (the row's token count), so
    each sequence contributes the mean over its tokens.
    """
    if loss_agg not in _AGGS:
        raise ValueError(f"loss_agg must be one of {_AGGS}, got {loss_agg!r}")
    weights = mask.float()
    if loss_agg == "sequence":
        weights = weights / weights.sum(dim=1, keepdim=True).clamp(min=1.0)
    return weights


def loss_denominator(mask: Tensor, row_weight: Tensor, loss_agg: LossAgg, loss_constant: int) -> Tensor:
    """Scalar normaliser of the summed loss, LOCAL to this batch (sum it across micro-batches/ranks).

    mask `[N, L]` bool counted tokens; row_weight `[N]` bool/float, 1 for rows in the loss.
    "token": number of counted tokens; "sequence": number of counted rows; "constant" (Dr. GRPO):
    number of counted rows * loss_constant.
    """
    if loss_agg not in _AGGS:
        raise ValueError(f"loss_agg must be one of {_AGGS}, got {loss_agg!r}")
    rows = row_weight.float().sum()
    if loss_agg == "token":
        return (mask.float() * row_weight.float().unsqueeze(1)).sum()
    if loss_agg == "sequence":
        return rows
    return rows * float(loss_constant)


def aggregate_loss(
    per_token: Tensor, mask: Tensor, row_weight: Tensor, loss_agg: LossAgg, denominator: Tensor | float
) -> Tensor:
    """Scalar loss: sum over rows and tokens of weight * per_token, divided by `denominator`.

    per_token, mask `[N, L]`; row_weight `[N]` (0 drops a row); denominator from `loss_denominator`,
    summed over every micro-batch and rank of the step, so that splitting a batch never changes it.
    """
    weights = token_weights(mask & row_weight.bool().unsqueeze(1), loss_agg)
    return (per_token * weights).sum() / denominator


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of `values` `[N, L]` over `mask` `[N, L]` (0 when the mask is empty); a 0-dim tensor."""
    mask = mask.bool()
    return torch.where(mask, values, 0.0).sum() / mask.sum().clamp(min=1).to(values.dtype)
