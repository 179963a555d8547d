"""A GRPO step's samples on one rank: each micro-batch of prompts decoded (or played as episodes
with an environment), its text cut where it ends (EOS or a stop string), and handed to the rewards
with its row fields. These are `Trainer` methods (`Trainer.sample`, `.play_episodes`,
`.completions`, `.token_ids_for_rewards`), kept here so the engine reads as the step's outline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch import Tensor

from trainer.data.pairs import row_fields
from trainer.grpo.episode_rewards import episode_rewards
from trainer.grpo.reward_source import Rewards, RewardSource
from trainer.sampling.episodes import EpisodeBatch, Episodes, generate_episode_batches
from trainer.sampling.rollout import Rollout, completion_token_ids
from trainer.sampling.row_noise import row_keys
from trainer.sampling.sampler import completions_text, generate
from trainer.sampling.stop import apply_stop_strings
from trainer.threads import torch_threads

if TYPE_CHECKING:
    from trainer.engine import Trainer


def sample_pairs(
    trainer: Trainer, pairs: Sequence[Any], rewards: RewardSource, first_index: int = 0
) -> tuple[list[Rollout], list[Any]]:
    """Roll out `pairs` in micro-batches of sampling.prompts_per_microbatch prompts, submitting
    each micro-batch's completions for scoring as soon as it is decoded.

    Row r of prompt i (pairs[i] is prompt first_index + i of the step) draws its own noise,
    keyed by (seed, GRPO step, first_index + i, r): the tokens do not depend on the micro-batch
    size or the number of ranks (`trainer.sampling.row_noise`).
    """
    cfg = trainer.cfg.sampling
    if trainer.episodes is not None:  # the episode's result is its reward: nothing to submit
        return _sample_episodes(trainer, pairs, first_index)
    rollouts, tickets = [], []
    for chunk, keys in _microbatches(trainer, pairs, first_index):
        prompts = [trainer.tokenizer.encode_prompt(p.prompt) for p in chunk]
        with trainer.sampling_precision.autocast(), torch_threads(trainer.sampling_threads):
            rollout = generate(
                trainer.policy, prompts, cfg, row_keys=keys, stop_at_eos=not trainer.fixed_length
            )
        rollout, texts = completion_texts(trainer, rollout)
        targets = [p.target for p in chunk for _ in range(cfg.group_size)]
        fields = row_fields(chunk, cfg.group_size, reward_token_ids_of(trainer, rollout))
        tickets.append(rewards.submit(texts, targets, fields=fields))
        rollouts.append(rollout)
    return rollouts, tickets


def _sample_episodes(
    trainer: Trainer, pairs: Sequence[Any], first_index: int
) -> tuple[list[Rollout], list[Rewards]]:
    """`sample_pairs` for an environment task: each micro-batch's episodes and their rewards (the
    micro-batches decode two at a time where the host answers asynchronously)."""
    batches = _microbatches(trainer, pairs, first_index)
    chunks, keys = [chunk for chunk, _ in batches], [k for _, k in batches]
    outs = play_episode_chunks(trainer, chunks, trainer.cfg.sampling, keys)
    return [o.rollout for o in outs], [episode_rewards(o.results, o.env_wait_s) for o in outs]


def _microbatches(
    trainer: Trainer, pairs: Sequence[Any], first_index: int
) -> list[tuple[Sequence[Any], Tensor]]:
    """`pairs` cut into micro-batches of sampling.prompts_per_microbatch prompts, each with its
    rows' noise keys."""
    cfg = trainer.cfg.sampling
    out = []
    for start in range(0, len(pairs), cfg.prompts_per_microbatch):
        chunk = pairs[start : start + cfg.prompts_per_microbatch]
        keys = row_keys(
            trainer.cfg.seed,
            trainer.grpo_steps,
            first_index + start,
            len(chunk),
            cfg.group_size,
            trainer.device,
        )
        out.append((chunk, keys))
    return out


def play_episode_chunks(
    trainer: Trainer,
    chunks: Sequence[Sequence[Any]],
    cfg,
    keys: Sequence[Tensor | None],
    greedy: bool = False,
) -> list[Episodes]:
    """The episodes of each chunk of pairs (cfg.group_size each), one micro-batch per chunk;
    keys: each chunk's row noise (None: greedy)."""
    batches = [
        EpisodeBatch([p.prompt for p in chunk], [getattr(p, "fields", None) or {} for p in chunk], k)
        for chunk, k in zip(chunks, keys, strict=True)
    ]
    with trainer.sampling_precision.autocast(), torch_threads(trainer.sampling_threads):
        return generate_episode_batches(
            trainer.policy, trainer.episodes, batches, cfg, trainer.stop, greedy=greedy
        )


def completion_texts(trainer: Trainer, rollout: Rollout) -> tuple[Rollout, list[str]]:
    """Each row's text for the scorer, and the rollout ending where that text ends (EOS or stop string)."""
    if trainer.stop:
        return apply_stop_strings(rollout, trainer.tokenizer, trainer.stop)
    return rollout, completions_text(rollout, trainer.tokenizer)


def recorded_texts(trainer: Trainer, rollout: Rollout) -> list[str]:
    """Each row's text as a person reads it: the scorer's text, or an episode's whole transcript."""
    if trainer.episodes is not None:
        return completions_text(rollout, trainer.tokenizer)
    return completion_texts(trainer, rollout)[1]


def reward_token_ids_of(trainer: Trainer, rollout: Rollout) -> list[list[int]] | None:
    """Each row's sampled ids when the rewards take them (`Trainer.reward_token_ids`), else None."""
    return completion_token_ids(rollout) if trainer.reward_token_ids else None
