"""Training strategies: how a trainer rank holds the policy (`ddp` replicates it, `fsdp` shards it).

    strategy = build_strategy(StrategyConfig(name="fsdp"), device, world, precision, reference_on_cpu)
    train_module = strategy.wrap(policy)

`trainer.strategy.base.TrainingStrategy` is the interface the trainer uses; the update, the loss and
the step records do not know which implementation runs. Importing this package loads no torch (the
service's config reads the strategy's config and its torch check); the strategies load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.strategy.config import FSDPConfig, StrategyConfig, StrategyName
from trainer.strategy.support import MIN_TORCH, fsdp_unavailable_reason, torch_too_old

if TYPE_CHECKING:
    import torch

    from trainer.precision import Precision
    from trainer.strategy.base import TrainingStrategy


def build_strategy(
    cfg: StrategyConfig,
    device: torch.device,
    world: int,
    precision: Precision,
    reference_on_cpu: bool | None = None,
) -> TrainingStrategy:
    """The strategy `cfg` names for one rank of `world`. reference_on_cpu: None when the run makes
    no KL reference copy, else `grpo.ref_on_cpu` (the fsdp strategy copies the policy for it before
    sharding)."""
    if cfg.name == "ddp":
        from trainer.strategy.ddp import DDPStrategy

        return DDPStrategy(device, world)
    from trainer.strategy.fsdp import FSDPStrategy

    return FSDPStrategy(cfg.fsdp, device, world, precision, reference_on_cpu)


__all__ = [
    "MIN_TORCH",
    "FSDPConfig",
    "StrategyConfig",
    "StrategyName",
    "build_strategy",
    "fsdp_unavailable_reason",
    "torch_too_old",
]
