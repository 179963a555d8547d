"""The training strategy's config: how the policy is spread over the data-parallel ranks."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trainer.config_base import Frozen

StrategyName = Literal["ddp", "fsdp"]


class FSDPConfig(Frozen):
    """FSDP2 (`torch.distributed.fsdp.fully_shard`): each block of the policy sharded over the ranks."""

    param_dtype: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="the dtype a block's weights are gathered in for its forward and backward (and the whole "
        "policy for decoding); sharded weights, gradients and AdamW's moments stay fp32, and gradients are "
        "reduced in fp32; auto: bf16 on a GPU when the run computes in bf16, else fp32",
    )
    reshard_after_forward: bool = Field(
        True,
        description="free each block's gathered weights after its forward and gather them again for its "
        "backward (least memory); false keeps them from the forward to the backward (one all-gather a block "
        "less per micro-batch, a whole unsharded policy held at the peak)",
    )


class StrategyConfig(Frozen):
    """What a trainer rank wraps its policy in (`trainer.strategy`)."""

    name: StrategyName = "ddp"
    fsdp: FSDPConfig = FSDPConfig()
