"""`scaling.strategy` at the edge: what fsdp refuses before a run starts, and the trainer's config.

Each refusal is one line naming the key, what is wrong and what to do: fsdp with one worker
(nothing to shard), FSDP's own settings given to a ddp run, a torch too old for FSDP2 here,
and the decode step's CUDA graphs (they replay reads of weight addresses that fsdp gathers anew
every step). A transformers model whose decoder layers fsdp cannot find is refused by the memory
plan, which builds the model's shape (`service.memory_plan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.strategy import FSDPConfig, StrategyConfig, fsdp_unavailable_reason

if TYPE_CHECKING:
    from service.config import ServiceConfig


def strategy_problem(cfg: ServiceConfig) -> str | None:
    """The line refusing `cfg`'s strategy settings, or None."""
    scaling = cfg.scaling
    if scaling.strategy == "ddp":
        if scaling.fsdp is not None:
            return (
                "scaling.fsdp is read with scaling.strategy=fsdp only; drop it or set scaling.strategy=fsdp"
            )
        return None
    if scaling.num_workers < 2:
        return (
            "scaling.strategy: 'fsdp' shards the policy over the trainer workers, and scaling.num_workers is 1: "
            "there is nothing to shard; use scaling.strategy=ddp (one process) or 2 or more workers"
        )
    if cfg.sampling.cuda_graphs:
        return (
            "sampling.cuda_graphs replays decode steps that read the weights where they were, and "
            "scaling.strategy=fsdp gathers them anew each step; set sampling.cuda_graphs=false"
        )
    return fsdp_unavailable_reason("cuda" if scaling.use_gpu else "cpu")


def strategy_config(cfg: ServiceConfig) -> StrategyConfig:
    """The trainer's `StrategyConfig` of a service config."""
    return StrategyConfig(name=cfg.scaling.strategy, fsdp=cfg.scaling.fsdp or FSDPConfig())
