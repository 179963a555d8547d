"""A rank's sampler actors (`sampling.placement: actors`): started beside the rank's trainer, fed
the trainer's weights each step and asked for its steps ahead (`trainer.rollouts_apart`)."""

from __future__ import annotations

from actors.pool.config import PoolConfig
from actors.run.step_data import StepData
from actors.sampling.group import SamplerGroup
from actors.sampling.spec import sampler_spec
from trainer.engine import Trainer
from trainer.policy import PromptFormat
from trainer.schedule import Schedule
from trainer.task import TrainingTask


def start_samplers(
    trainer: Trainer,
    task: TrainingTask,
    *,
    prompt_format: PromptFormat,
    reward_token_ids: bool,
    pool: PoolConfig,
    run_id: str,
    rank: int,
) -> SamplerGroup:
    """This rank's sampler actors, built from the trainer's config and its machine's choices; the
    trainer's GRPO steps sample through them from now on. task: the run's (its alphabet, its stop strings)."""
    if trainer.episodes is not None:
        raise ValueError(
            "sampling.placement=actors samples single-turn tasks; an environment task's episodes are played "
            "by the trainer ranks: use sampling.placement=trainer"
        )
    builtin = trainer.cfg.model.source == "builtin"
    sampler = sampler_spec(
        trainer,
        alphabet=task.alphabet if builtin else None,
        prompt_format=prompt_format,
        stop=tuple(task.stop),
        reward_token_ids=reward_token_ids,
        pool=pool,
        run_id=run_id,
    )
    group = SamplerGroup.create(sampler, trainer.cfg.sampling.actors, run_id=run_id, rank=rank)
    trainer.sample_apart(group)
    return group


def plan_steps(trainer: Trainer, schedule: Schedule, data: StepData) -> None:
    """Tell the trainer's samples apart where each GRPO step's pairs come from (to request ahead)."""
    trainer.rollouts.plan(lambda t: data.ahead(schedule.grpo_step(t)), schedule.grpo_steps)
