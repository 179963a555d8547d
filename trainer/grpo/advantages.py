"""Group-relative advantages: each reward against its own group's, as pure tensor functions.

Layout: N = G*K rows, group after group (prompt g owns rows g*K .. g*K+K-1).
"""

from __future__ import annotations

from typing import get_args

from torch import Tensor

from trainer.config import Scale

_SCALES = get_args(Scale)


def _check_rewards(rewards: Tensor, group_size: int) -> None:
    if not isinstance(rewards, Tensor) or rewards.dim() != 1:
        shape = tuple(rewards.shape) if isinstance(rewards, Tensor) else type(rewards).__name__
        raise ValueError(f"rewards must be a 1-D tensor laid out group after group, got {shape}")
    if not rewards.is_floating_point():
        raise ValueError(f"rewards must be a floating-point tensor, got {rewards.dtype}")
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    if rewards.numel() == 0 or rewards.numel() % group_size:
        raise ValueError(
            f"len(rewards) ({rewards.numel()}) must be a positive multiple of group_size ({group_size})"
        )


def group_advantages(rewards: Tensor, group_size: int, scale: Scale = "group", eps: float = 1e-6) -> Tensor:
    """Advantages `[N]` of rewards `[N]` laid out group after group (N = G * group_size).

    Every scale subtracts the group mean. Then:
    - "group": divide by (the group's std + eps)  (GRPO, DeepSeekMath);
    - "batch": divide by (the std of all N rewards + eps)  (raw rewards, as TRL's scale_rewards="batch");
    - "none":  no division (Dr. GRPO: the std division biases toward too-easy and too-hard prompts).

    The std is the population std (`unbiased=False`, divide by K): the normalised advantages of a
    group then have exactly unit RMS, whatever K is, and the value stays defined for every group
    size. (TRL uses the unbiased std, which shrinks advantages by sqrt((K-1)/K): 0.935 at K=8.)
    A group with equal rewards gets advantage 0 in every scale.
    """
    _check_rewards(rewards, group_size)
    if scale not in _SCALES:
        raise ValueError(f"scale must be one of {_SCALES}, got {scale!r}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    grouped = rewards.view(-1, group_size)  # [G, K]
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # [G, K]
    if scale == "group":
        centred = centred / (grouped.std(dim=1, unbiased=False, keepdim=True) + eps)
    elif scale == "batch":
        centred = centred / (rewards.std(unbiased=False) + eps)
    return centred.reshape(-1)


def zero_variance_groups(rewards: Tensor, group_size: int, tol: float = 1e-6) -> Tensor:
    """`[G]` bool: True for groups whose rewards all lie within `tol` of each other (max - min <= tol).

    Such a group carries no learning signal (every advantage is 0); the trainer drops or keeps it
    (`GRPOConfig.zero_var_groups`).
    """
    _check_rewards(rewards, group_size)
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    grouped = rewards.view(-1, group_size)  # [G, K]
    return (grouped.amax(dim=1) - grouped.amin(dim=1)) <= tol
