"""`scaling.strategy` at the edge: the trainer's `StrategyConfig` of a service config.

What fsdp refuses before a run starts is the config's own check (`ServiceConfig._check_strategy`);
a transformers model whose decoder layers fsdp cannot find is refused by the memory plan, which
builds the model's shape (`service.memory_plan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.strategy import FSDPConfig, StrategyConfig

if TYPE_CHECKING:
    from service.config import ServiceConfig


def strategy_config(cfg: ServiceConfig) -> StrategyConfig:
    """The trainer's `StrategyConfig` of a service config."""
    return StrategyConfig(name=cfg.scaling.strategy, fsdp=cfg.scaling.fsdp or FSDPConfig())
