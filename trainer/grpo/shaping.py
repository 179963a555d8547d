"""What happens to a step's rewards before group selection, and to its rows after it.

- Overlong (`grpo.overlong`): a completion cut at max_new_tokens (no EOS, no stop string) is
  `mask`ed out of the loss (DAPO's overlong filtering), or its reward gets DAPO's soft
  penalty (`penalty`): 0 up to max_new_tokens - buffer tokens, then falling linearly to
  -overlong_penalty at max_new_tokens.
- KL in the reward (`grpo.kl_placement='reward'`, verl's use_kl_in_reward): each completion's
  reward loses beta * the sum of its per-token KL to the reference, measured on the sampler's
  log-probs (the policy that sampled), before advantages are computed; the loss then has no KL.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

from trainer.config import GRPOConfig
from trainer.grpo.kl import sequence_kl
from trainer.grpo.reward_source import Rewards
from trainer.grpo.selection import GroupSelection
from trainer.sampling.rollout import Rollout


def truncated_rows(rollout: Rollout, eos_id: int, max_new_tokens: int) -> Tensor:
    """`[N]` bool: rows that used every one of max_new_tokens without emitting EOS (on the host)."""
    mask = rollout.completion_mask
    has_eos = ((rollout.completion_ids == eos_id) & mask).any(dim=1)
    return ((mask.sum(dim=1) >= max_new_tokens) & ~has_eos).cpu()


def overlong_penalty(lengths: Tensor, max_new_tokens: int, buffer: int, penalty: float) -> Tensor:
    """DAPO's soft overlong penalty `[N]` (<= 0) of completion lengths `[N]`.

    -penalty * (length - (max_new_tokens - buffer)) / buffer past max_new_tokens - buffer, else 0.
    """
    start = max_new_tokens - buffer
    exceed = (lengths.double() - start).clamp(min=0.0)
    return -(exceed / buffer * penalty).clamp(max=penalty)


def shifted(rewards: Rewards, delta: Tensor) -> Rewards:
    """`rewards` with delta `[N]` added to every usable value (an unusable one stays unusable)."""
    values = [
        v + float(d) if u else v
        for v, d, u in zip(rewards.values, delta.tolist(), rewards.usable, strict=True)
    ]
    return dataclasses.replace(rewards, values=values)


class Shaped:
    """A step's rewards after overlong and KL shaping, with what the step reports about them."""

    def __init__(self, rewards: Rewards, truncated: Tensor, kl_penalty: Tensor, delta: Tensor) -> None:
        self.rewards = rewards
        self.truncated = truncated  # [N] bool
        self.kl_penalty = kl_penalty  # [N] float64, beta * summed KL (0 unless kl_placement='reward')
        self.delta = delta  # [N] float64, what shaping added to each reward


def shape_rewards(
    cfg: GRPOConfig,
    rollouts: Sequence[Rollout],
    rewards: Rewards,
    ref_logprobs: Sequence[Tensor] | None,
    eos_id: int,
    max_new_tokens: int,
) -> Shaped:
    """The overlong penalty and the KL-in-reward penalty applied to `rewards` (rows in rollout order)."""
    truncated = torch.cat([truncated_rows(r, eos_id, max_new_tokens) for r in rollouts])
    delta = torch.zeros(truncated.numel(), dtype=torch.float64)
    if cfg.overlong == "penalty":
        lengths = torch.cat([r.completion_mask.sum(dim=1).cpu() for r in rollouts])
        delta += overlong_penalty(lengths, max_new_tokens, cfg.overlong_buffer, cfg.overlong_penalty)
    kl_penalty = torch.zeros_like(delta)
    if cfg.kl_placement == "reward" and ref_logprobs is not None:
        sums = [
            sequence_kl(r.old_logprobs, ref, r.completion_mask, cfg.kl_estimator)
            for r, ref in zip(rollouts, ref_logprobs, strict=True)
        ]
        kl_penalty = cfg.beta * torch.cat(sums).double().cpu()  # one host copy of N numbers
        delta -= kl_penalty
    shaped = shifted(rewards, delta) if bool(delta.any()) else rewards
    return Shaped(shaped, truncated, kl_penalty, delta)


def mask_rows(selection: GroupSelection, rows: Tensor) -> GroupSelection:
    """`selection` with `rows` `[N]` bool taken out of the loss (policy and KL terms)."""
    keep = (~rows).float()
    return selection._replace(row_weight=selection.row_weight * keep, kl_weight=selection.kl_weight * keep)
