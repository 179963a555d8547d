"""Per-token estimators of KL(policy || reference), one signature, chosen by `grpo.kl_estimator`.

With r = ref_logp - logp (Schulman, "Approximating KL divergence"; verl `kl_penalty`):
k1 = -r (unbiased, can be negative), k2 = r^2 / 2 (low variance, biased), k3 = exp(r) - r - 1
(unbiased, always >= 0). As in verl, the log-ratio is clamped to +-20 before use and k3 to
+-10 after, so one token whose log-ratio is 100 cannot make the loss infinite (its gradient is
then 0: the clamp saturates).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

import torch
from torch import Tensor

from trainer.config import KLEstimator

LOG_RATIO_CLAMP = 20.0
K3_CLAMP = 10.0


def _clamped_log_ratio(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """r = ref - logp `[N, L]`, clamped to +-LOG_RATIO_CLAMP."""
    return torch.clamp(ref_logprobs - logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def k1_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """logp - ref `[N, L]`: the plain log-ratio."""
    return -_clamped_log_ratio(logprobs, ref_logprobs)


def k2_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """(logp - ref)^2 / 2 `[N, L]`."""
    return 0.5 * _clamped_log_ratio(logprobs, ref_logprobs).square()


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """exp(r) - r - 1 with r = ref - logp `[N, L]`: >= 0, exactly 0 where the two are equal."""
    r = _clamped_log_ratio(logprobs, ref_logprobs)
    # expm1: exact near r = 0, where exp(r) - 1 would lose digits
    return torch.clamp(torch.expm1(r) - r, -K3_CLAMP, K3_CLAMP)


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"k1": k1_kl, "k2": k2_kl, "k3": k3_kl}
assert set(KL_ESTIMATORS) == set(get_args(KLEstimator))


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """Per-token KL estimate `[N, L]` by the named estimator (`grpo.kl_estimator`)."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {sorted(KL_ESTIMATORS)}, got {estimator!r}")
    return KL_ESTIMATORS[estimator](logprobs, ref_logprobs)


def sequence_kl(
    logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, estimator: KLEstimator = "k3"
) -> Tensor:
    """Summed per-token KL of each row `[N]` over `mask` `[N, L]` (the penalty of kl_placement='reward')."""
    kl = kl_estimate(torch.where(mask, logprobs, 0.0), torch.where(mask, ref_logprobs, 0.0), estimator)
    return torch.where(mask, kl, 0.0).sum(dim=1)
