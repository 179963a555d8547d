"""What a sampler actor builds its policy and decodes from: the trainer's config with the choices
the trainer made for its machine (precision, decoding dtype, decode threads), so that on the same
kind of device an actor decodes exactly as the trainer's own sampler would."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from actors.pool.config import PoolConfig
from trainer.config import TrainerConfig
from trainer.policy import PromptFormat

if TYPE_CHECKING:
    from trainer.engine import Trainer


@dataclass(frozen=True)
class SamplerSpec:
    """Everything a sampler actor needs, sent once when it starts (pickled)."""

    trainer: TrainerConfig  # with the trainer's resolved precision where the devices are alike
    alphabet: str | None  # the built-in GPT's characters (None: an hf policy brings its tokenizer)
    prompt_format: PromptFormat
    stop: tuple[str, ...]  # the task's stop strings
    reward_token_ids: bool  # the rewards take each completion's sampled ids
    pool: PoolConfig  # the reward pool it scores on
    run_id: str
    torch_threads: int  # torch's intra-op threads in the actor
    decode_threads: int | None  # threads while decoding (the trainer's choice; None: torch_threads)
    use_gpu: bool  # decode on the actor's CUDA device


def sampler_spec(
    trainer: Trainer,
    *,
    alphabet: str | None,
    prompt_format: PromptFormat,
    stop: tuple[str, ...],
    reward_token_ids: bool,
    pool: PoolConfig,
    run_id: str,
) -> SamplerSpec:
    """The spec of `trainer`'s sampler actors (`sampling.actors`)."""
    cfg, actors = trainer.cfg, trainer.cfg.sampling.actors
    use_gpu = actors.gpus_per_actor > 0
    config = cfg
    if (trainer.device.type == "cuda") == use_gpu:  # alike devices: decode as the trainer does
        config = cfg.model_copy(
            update={
                "precision": cfg.precision.model_copy(update={"dtype": trainer.precision.dtype}),
                "sampling": cfg.sampling.model_copy(update={"dtype": trainer.sampling_precision.dtype}),
            }
        )
    threads = actors.torch_threads or max(1, math.floor(actors.cpus_per_actor))
    decode = trainer.sampler.threads if trainer.device.type == "cpu" and not use_gpu else None
    return SamplerSpec(
        config, alphabet, prompt_format, tuple(stop), reward_token_ids, pool, run_id, threads, decode, use_gpu
    )
