"""From a step's rewards to per-row advantages and loss weights (host-side, before the update).

Rewards arrive on the host as lists, so which groups enter the loss is decided here without
touching the device: groups with an unusable reward (timeout, error) are dropped or fail the
step, zero-variance groups are dropped or kept, and advantages are computed over the usable
groups only (an unusable reward never leaks into a mean or a std).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from torch import Tensor

from trainer.config import GRPOConfig
from trainer.grpo.advantages import group_advantages, zero_variance_groups
from trainer.grpo.reward_source import SKIPPED_STATUS, Rewards

# (sum, sum of squares, count) of this rank's rewards -> the same, summed over every rank
MomentReducer = Callable[[Tensor], Tensor]


class RewardFailure(RuntimeError):
    """A group had an unusable reward (timeout, scorer error) and grpo.on_unusable_reward='fail'."""


class GroupSelection(NamedTuple):
    """Per-row advantages and loss weights of one rank's step, on the host (CPU tensors)."""

    advantages: Tensor  # [N] float32; 0 for rows of dropped groups
    row_weight: Tensor  # [N] float32: 1 for rows in the policy term, 0 for rows of dropped groups
    kl_weight: Tensor  # [N] float32: 1 for rows in the KL term (zero-variance groups too, when beta > 0)
    num_groups: int  # G
    unusable_groups: int  # groups with at least one unusable reward (skipped ones included)
    zero_var_groups: int  # usable groups whose rewards are all equal (within zero_var_tol)
    dropped_groups: int  # groups left out of the loss (unusable, plus zero-variance ones under "drop")
    reward_mean: float  # mean of the usable rewards (nan when there is none)
    skipped_groups: int = 0  # groups with an item a reward skipped (returned None): always dropped

    @property
    def kept_groups(self) -> int:
        """Groups in the policy term (this rank's)."""
        return self.num_groups - self.dropped_groups


def _batch_std_advantages(
    values: Tensor, group_size: int, eps: float, reduce_moments: MomentReducer
) -> Tensor:
    """Group-centred advantages divided by the std of the rewards of EVERY rank (population std)."""
    centred = group_advantages(values, group_size, "none")
    v = values.double()
    moments = reduce_moments(
        torch.stack([v.sum(), (v * v).sum(), torch.tensor(float(v.numel()), dtype=torch.float64)])
    )
    total, total_sq, count = moments.tolist()
    mean = total / count
    std = max(total_sq / count - mean * mean, 0.0) ** 0.5
    return (centred / (std + eps)).float()


def select_groups(
    rewards: Rewards, group_size: int, cfg: GRPOConfig, reduce_moments: MomentReducer | None = None
) -> GroupSelection:
    """Advantages and loss weights for `rewards` laid out group after group.

    reduce_moments: under data parallelism with scale='batch', sums (sum, sum of squares, count)
    over ranks so the batch std is the global one (None: this rank's batch is the whole batch).
    A rank without usable groups still calls it, so every rank takes part in the collective.
    """
    n = len(rewards.values)
    if n == 0 or n % group_size:
        raise ValueError(f"{n} rewards do not form groups of group_size={group_size}")
    g = n // group_size
    values = torch.tensor(rewards.values, dtype=torch.float32).view(g, group_size)
    usable = torch.tensor(rewards.usable, dtype=torch.bool).view(g, group_size).all(dim=1)  # [G]
    unusable = int((~usable).sum())
    skipped = torch.tensor([s == SKIPPED_STATUS for s in rewards.statuses]).view(g, group_size).any(dim=1)
    failing = int((~usable & ~skipped).sum())  # a skip is the reward's choice, never a failure
    if failing and cfg.on_unusable_reward == "fail":
        bad = [
            s for s, u in zip(rewards.statuses, rewards.usable, strict=True) if not u and s != SKIPPED_STATUS
        ]
        raise RewardFailure(
            f"{failing} of {g} groups have an unusable reward (statuses {sorted(set(bad))}); "
            "grpo.on_unusable_reward='fail' stops the run (use 'drop_group' to train on the rest)"
        )
    usable_values = values[usable].reshape(-1)  # [G_usable * K]
    zero_var = torch.zeros(g, dtype=torch.bool)
    advantages = torch.zeros(g, group_size)
    if reduce_moments is not None and cfg.scale == "batch":
        if usable_values.numel():
            advantages[usable] = _batch_std_advantages(
                usable_values, group_size, cfg.eps, reduce_moments
            ).view(-1, group_size)
        else:
            reduce_moments(torch.zeros(3, dtype=torch.float64))
    elif usable_values.numel():
        advantages[usable] = group_advantages(usable_values, group_size, cfg.scale, cfg.eps).view(
            -1, group_size
        )
    if usable_values.numel():
        zero_var[usable] = zero_variance_groups(usable_values, group_size, cfg.zero_var_tol)
    keep = usable & ~zero_var if cfg.zero_var_groups == "drop" else usable
    # A zero-variance group carries no policy gradient, but its samples still measure the KL to the
    # reference: with a KL term in the loss it keeps regularising them (as TRL, which never drops).
    kl_keep = usable if (cfg.beta > 0 and cfg.kl_placement == "loss") else keep
    advantages[~keep] = 0.0
    return GroupSelection(
        advantages=advantages.reshape(-1),
        row_weight=keep.repeat_interleave(group_size).float(),
        kl_weight=kl_keep.repeat_interleave(group_size).float(),
        num_groups=g,
        unusable_groups=unusable,
        zero_var_groups=int(zero_var.sum()),
        dropped_groups=int((~keep).sum()),
        reward_mean=float(usable_values.mean()) if usable_values.numel() else float("nan"),
        skipped_groups=int(skipped.sum()),
    )


# What a step without an update does not have: no loss was taken, no KL measured.
NO_UPDATE_KEYS = (
    "loss", "kl", "clip_frac", "grad_norm", "entropy", "sampler_logprob_gap",
    "is_weight_mean", "is_weight_max", "is_clip_frac",
)  # fmt: skip


def skip_record(sums: Mapping[str, float]) -> dict[str, Any]:
    """The record of a GRPO step whose groups were all dropped: `skipped` with the reason, and the
    update's figures absent (None), never a loss or KL of 0. sums: the step's group counts over
    every rank (`trainer.grpo.step_figures.step_sums`)."""
    unusable, equal = int(sums["unusable_groups"]), int(sums["zero_var_groups"])
    failed = f"{unusable} with a failed reward" if unusable else ""
    same = f"{equal} with equal rewards" if equal else ""
    why = "; ".join(p for p in (failed, same) if p) or "none kept"
    return {
        **dict.fromkeys(NO_UPDATE_KEYS),
        "skipped": 1.0,
        "skip_reason": f"no update: all {int(sums['groups'])} groups dropped ({why})",
    }
