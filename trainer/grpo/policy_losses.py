"""The registry of policy losses: whole functions with one signature, chosen once by `grpo.policy_loss`.

    @register_policy_loss("my_loss")
    def my_loss(inputs: PolicyLossInputs, cfg: GRPOConfig) -> PolicyLossTerms: ...

(verl's `@register_policy_loss`). The update looks its function up once, at construction, and calls
it on every micro-batch without knowing which variant it holds. Every built-in loss is the clipped
surrogate of `trainer.grpo.loss` with its own fixed choices; a name that selects one in config
must also be in `trainer.config.PolicyLoss` (asserted below), whose parameters the config checks.

Combinations are names too: truncated importance sampling corrects WHICH policy sampled the tokens,
not the objective, so it is a wrapper (`truncated_is`) that weights the surrogate of any other
loss; `tis` is `truncated_is(vanilla)`, `gspo+tis` is `truncated_is(gspo)`, and so on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, get_args

import torch
from torch import Tensor

from trainer.config import GRPOConfig, PolicyLoss
from trainer.grpo.loss import PolicyLossTerms, policy_loss_terms


class PolicyLossInputs(NamedTuple):
    """What a policy loss reads of one micro-batch: N rows, L completion tokens."""

    logprobs: Tensor  # [N, L] the policy being trained, with gradient
    old_logprobs: Tensor  # [N, L] the trainer's policy that sampled (the ratio's denominator), no gradient
    sampler_logprobs: Tensor  # [N, L] the sampler's own (KV cache, autocast), no gradient
    advantages: Tensor  # [N]
    mask: Tensor  # [N, L] bool: the tokens that take part
    ref_logprobs: Tensor | None = None  # [N, L] the KL reference; None: no KL term in this loss
    is_weights: Tensor | None = None  # [N, L] importance weights on the surrogate (set by `truncated_is`)


PolicyLossFn = Callable[[PolicyLossInputs, GRPOConfig], PolicyLossTerms]
POLICY_LOSSES: dict[str, PolicyLossFn] = {}


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: file `fn(inputs, cfg) -> PolicyLossTerms` under `name` (a name is taken once)."""

    def register(fn: PolicyLossFn) -> PolicyLossFn:
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is already registered")
        POLICY_LOSSES[name] = fn
        return fn

    return register


def get_policy_loss(name: str) -> PolicyLossFn:
    """The registered function called `name` (ValueError naming the registered ones otherwise)."""
    if name not in POLICY_LOSSES:
        raise ValueError(f"unknown policy loss {name!r}; registered: {', '.join(POLICY_LOSSES)}")
    return POLICY_LOSSES[name]


def _clipped(inputs: PolicyLossInputs, cfg: GRPOConfig, **variant) -> PolicyLossTerms:
    """The clipped surrogate (+ beta * KL when there is a reference) with a loss's own `variant`."""
    beta = cfg.beta if inputs.ref_logprobs is not None else 0.0  # no reference: the KL is elsewhere
    return policy_loss_terms(
        inputs.logprobs, inputs.old_logprobs, inputs.advantages, inputs.mask, cfg.clip_low,
        cfg.clip_high, inputs.ref_logprobs, beta, kl_estimator=cfg.kl_estimator,
        is_weights=inputs.is_weights, **variant,
    )  # fmt: skip


@register_policy_loss("vanilla")
def vanilla(inputs: PolicyLossInputs, cfg: GRPOConfig) -> PolicyLossTerms:
    """Token ratio pi / pi_old, clipped to [1 - clip_low, 1 + clip_high] (PPO; DAPO's clip-higher)."""
    return _clipped(inputs, cfg, ratio_level="token")


@register_policy_loss("dual_clip")
def dual_clip(inputs: PolicyLossInputs, cfg: GRPOConfig) -> PolicyLossTerms:
    """vanilla, and a token with A < 0 loses at most -A * cfg.dual_clip (Ye et al. 2020)."""
    return _clipped(inputs, cfg, ratio_level="token", dual_clip=cfg.dual_clip)


@register_policy_loss("gspo")
def gspo(inputs: PolicyLossInputs, cfg: GRPOConfig) -> PolicyLossTerms:
    """The length-normalised sequence ratio on every token, clipped (GSPO, Zheng et al. 2025)."""
    return _clipped(inputs, cfg, ratio_level="sequence")


@register_policy_loss("gspo+dual_clip")
def gspo_dual_clip(inputs: PolicyLossInputs, cfg: GRPOConfig) -> PolicyLossTerms:
    """gspo with the dual-clip bound of `dual_clip`."""
    return _clipped(inputs, cfg, ratio_level="sequence", dual_clip=cfg.dual_clip)


def truncated_is_weights(old_logprobs: Tensor, sampler_logprobs: Tensor, cap: float) -> Tensor:
    """min(p_trainer_old / p_sampler, cap) per token `[N, L]` (Yao et al. 2025): the sampler's numerics
    (KV cache, autocast) differ from the trainer's, so its tokens are reweighted toward the trainer's.

    It is also AReaL's decoupled loss in its clamp form: when the sampler ran older weights
    (`grpo.max_staleness`), the sampler's log-probs are the behaviour policy and the trainer's
    recomputed ones (the ratio's denominator) the proximal policy, so the weight corrects for the
    lag and the clipped ratio keeps the update near the proximal policy."""
    return torch.clamp(torch.exp(old_logprobs - sampler_logprobs), max=cap)


def truncated_is(base: PolicyLossFn) -> PolicyLossFn:
    """`base` with its surrogate weighted by the truncated importance weights of cap `cfg.tis_cap`;
    the terms carry the weights and which tokens the cap cut (the step's `is_weight_*` figures)."""

    def loss(inputs: PolicyLossInputs, cfg: GRPOConfig) -> PolicyLossTerms:
        weights = truncated_is_weights(inputs.old_logprobs, inputs.sampler_logprobs, cfg.tis_cap)
        cut = inputs.old_logprobs - inputs.sampler_logprobs > math.log(cfg.tis_cap)
        terms = base(inputs._replace(is_weights=weights), cfg)
        return terms._replace(is_weights=weights, is_clipped=cut & inputs.mask.bool())

    loss.__doc__ = f"{base.__name__} times truncated importance weights (cap grpo.tis_cap)."
    return loss


register_policy_loss("tis")(truncated_is(vanilla))
register_policy_loss("dual_clip+tis")(truncated_is(dual_clip))
register_policy_loss("gspo+tis")(truncated_is(gspo))
register_policy_loss("gspo+dual_clip+tis")(truncated_is(gspo_dual_clip))

assert set(POLICY_LOSSES) == set(get_args(PolicyLoss)), "register every name of trainer.config.PolicyLoss"
