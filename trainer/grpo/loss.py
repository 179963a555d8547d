"""The GRPO objective as pure functions: the ratio (token or sequence), the clipped surrogate
(with dual-clip), the KL penalty, aggregation. Which of them a run uses is a registered policy loss
(`trainer.grpo.policy_losses`), never a flag read by the update.

Layout everywhere: N = G*K rows, group after group (prompt g owns rows g*K .. g*K+K-1); L is the
completion length. Nothing here moves data to the host: every result is a tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, get_args

import torch
from torch import Tensor

from trainer.config import KLEstimator, LossAgg, RatioLevel
from trainer.grpo.kl import k3_kl, kl_estimate

_AGGS = get_args(LossAgg)
SEQ_LOG_RATIO_MAX = 10.0  # verl's GSPO clamp on the sequence log-ratio

__all__ = ["k3_kl"]  # re-exported: the estimators live in trainer.grpo.kl


def token_log_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """log(pi / pi_old) per token `[N, L]` (PPO, GRPO); 0 where masked."""
    return torch.where(mask, logprobs - old_logprobs, 0.0)


def sequence_log_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """GSPO's sequence ratio on every token `[N, L]`: the value is the row's mean log-ratio
    (log of the length-normalised ratio (pi/pi_old)^(1/|y|)), the gradient is the token's own
    d logp (GSPO-token form, verl `compute_policy_loss_gspo`), clamped above at 10 as verl does."""
    lengths = mask.sum(dim=1, keepdim=True).clamp(min=1)
    seq = (torch.where(mask, logprobs - old_logprobs, 0.0).sum(dim=1, keepdim=True) / lengths).detach()
    value = logprobs - logprobs.detach() + seq
    return torch.where(mask, torch.clamp(value, max=SEQ_LOG_RATIO_MAX), 0.0)


LOG_RATIOS: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    "token": token_log_ratio,
    "sequence": sequence_log_ratio,
}
assert set(LOG_RATIOS) == set(get_args(RatioLevel))


def clipped_surrogate(
    log_ratio: Tensor, advantages: Tensor, clip_low: float, clip_high: float, dual_clip: float | None
) -> tuple[Tensor, Tensor]:
    """(per-token loss `[N, L]`, clipped `[N, L]` bool) of PPO's clipped objective.

    loss = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)); with dual_clip c,
    a token with A < 0 is further bounded: min(that, -A * c) (Ye et al. 2020, verl `clip_ratio_c`).
    `clipped` marks tokens whose loss came from a bound (their policy gradient is 0).
    """
    ratio = torch.exp(log_ratio)
    adv = advantages.detach().unsqueeze(1).to(ratio.dtype)  # [N, 1]
    unclipped = -adv * ratio
    bounded = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, bounded)
    clipped = bounded > unclipped
    if dual_clip is not None:
        lower = -adv * dual_clip
        dual = (adv < 0) & (lower < loss)
        loss = torch.where(dual, lower.expand_as(loss), loss)
        clipped = clipped | dual
    return loss, clipped


class PolicyLossTerms(NamedTuple):
    """Per-token terms `[N, L]`; masked positions hold 0 (never NaN or inf from padding)."""

    loss: Tensor  # pg + beta * kl
    pg: Tensor  # the clipped surrogate (times the truncated-IS weight when there is one)
    kl: Tensor  # the KL estimate to the reference, with its gradient (zeros when there is none)
    clipped: Tensor  # bool: the clipped branch was taken, so this token's policy gradient is 0
    is_weights: Tensor | None = None  # the importance weights on the surrogate; None: none (all 1)
    is_clipped: Tensor | None = None  # bool: the token's weight was cut at its cap; None: no cap


def _check_terms(logprobs, old_logprobs, advantages, mask, clip_low, clip_high, ref_logprobs, beta):
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


def policy_loss_terms(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    ref_logprobs: Tensor | None = None,
    beta: float = 0.0,
    *,
    ratio_level: RatioLevel = "token",
    dual_clip: float | None = None,
    kl_estimator: KLEstimator = "k3",
    is_weights: Tensor | None = None,
) -> PolicyLossTerms:
    """Per-token clipped-surrogate loss plus an optional KL penalty: the shared maths of the policy
    losses registered in `trainer.grpo.policy_losses`, each of which fixes these choices for itself.

    logprobs, old_logprobs, ref_logprobs `[N, L]` (old and ref carry no gradient); advantages `[N]`;
    mask `[N, L]` bool, the tokens that take part; is_weights `[N, L]` (no gradient): truncated
    importance weights multiplying the surrogate. ratio_level picks the ratio (`LOG_RATIOS`), and
    kl_estimator the KL (`trainer.grpo.kl`): loss = surrogate * is_weights + beta * kl.
    """
    _check_terms(logprobs, old_logprobs, advantages, mask, clip_low, clip_high, ref_logprobs, beta)
    if ratio_level not in LOG_RATIOS:
        raise ValueError(f"ratio_level must be one of {sorted(LOG_RATIOS)}, got {ratio_level!r}")
    mask = mask.bool()
    # Masked positions may hold anything (padding logits). Replace them BEFORE any arithmetic: a
    # where() after exp() would still send 0 * inf = NaN into the gradient.
    logprobs = torch.where(mask, logprobs, 0.0)
    old = torch.where(mask, old_logprobs.detach(), 0.0)
    log_ratio = LOG_RATIOS[ratio_level](logprobs, old, mask)
    pg, clipped = clipped_surrogate(log_ratio, advantages, clip_low, clip_high, dual_clip)
    if is_weights is not None:
        pg = pg * torch.where(mask, is_weights.detach(), 0.0)
    pg = torch.where(mask, pg, 0.0)
    if ref_logprobs is not None and beta > 0:
        kl = kl_estimate(logprobs, torch.where(mask, ref_logprobs.detach(), 0.0), kl_estimator)
        kl = torch.where(mask, kl, 0.0)
    else:
        kl = torch.zeros_like(pg)
    return PolicyLossTerms(loss=pg + beta * kl, pg=pg, kl=kl, clipped=mask & clipped)


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
