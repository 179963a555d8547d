"""GRPO: group advantages and group selection, the loss maths, the update, and how rewards arrive.

from trainer.grpo import group_advantages
group_advantages(rewards, group_size, scale="group", eps=1e-6)   # scale="none" is Dr. GRPO
"""

from trainer.grpo.advantages import group_advantages, zero_variance_groups
from trainer.grpo.loss import (
    PolicyLossTerms,
    aggregate_loss,
    k3_kl,
    loss_denominator,
    masked_mean,
    policy_loss_terms,
    token_weights,
)
from trainer.grpo.policy_losses import (
    POLICY_LOSSES,
    PolicyLossInputs,
    get_policy_loss,
    register_policy_loss,
)
from trainer.grpo.reward_source import InlineRewards, Rewards, RewardSource, ScoreFn
from trainer.grpo.selection import GroupSelection, RewardFailure, select_groups
from trainer.grpo.update import UPDATE_METRICS, GRPOUpdate, UpdateContext, record_empty_update

__all__ = [
    "POLICY_LOSSES",
    "UPDATE_METRICS",
    "GRPOUpdate",
    "GroupSelection",
    "InlineRewards",
    "PolicyLossInputs",
    "PolicyLossTerms",
    "RewardFailure",
    "RewardSource",
    "Rewards",
    "ScoreFn",
    "UpdateContext",
    "aggregate_loss",
    "get_policy_loss",
    "group_advantages",
    "k3_kl",
    "loss_denominator",
    "masked_mean",
    "policy_loss_terms",
    "record_empty_update",
    "register_policy_loss",
    "select_groups",
    "token_weights",
    "zero_variance_groups",
]
