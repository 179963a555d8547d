"""What a held-out evaluation decodes, on one rank: greedy completions (and, for pass@k, k sampled
ones per pair) scored by the task's scorer, or one greedy episode per pair for an environment task.

`Trainer.evaluate` is `evaluate_pairs`; `trainer.evaluation` turns what is decoded here into figures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from trainer.evaluation import greedy_summary, sampled_summary, summarise_eval
from trainer.grpo.episode_rewards import episode_figures, episode_rewards, own_env_metrics
from trainer.grpo.reward_source import Rewards
from trainer.rng import derived_seed
from trainer.sampling.episodes import transcript_text
from trainer.sampling.sampler import generate
from trainer.threads import torch_threads

if TYPE_CHECKING:
    from trainer.engine import Trainer

EVAL_PROMPTS_PER_BATCH = 64


def evaluate_pairs(
    trainer: Trainer,
    pairs: Sequence[Any],
    score_fn,
    n_samples: int = 0,
    metrics_fn=None,
    sample_k: int = 0,
    group_by: tuple[str, Callable[[str], str]] | None = None,
) -> dict[str, Any]:
    """Greedy completions of `pairs`, scored by `score_fn(completions, targets[, fields])`.

    Returns exact_match (over pairs with a target), valid_rate (share of status 'ok'; None when
    the scorer gives no statuses), reward_mean, count and `n_samples` example dicts, plus what
    the task's `metrics_fn(scorer output)` adds. With sample_k > 0 also k, pass_at_1, pass_at_k
    and mean_at_k of sample_k completions per pair sampled at the training temperature (a
    sample passes when its reward is at least grpo.eval_pass_reward). group_by (name, prompt ->
    key) adds `by_<name>`: the same figures for each key (the FEN task: game length in plies).
    Runs on this rank alone. With episodes (an environment task) every pair is one greedy
    episode, its result the reward (`score_fn` unused).
    """
    if trainer.episodes is not None:
        return _evaluate_episodes(trainer, pairs, n_samples)
    completions, ids = _complete(trainer, pairs, 1, greedy=True)
    summary = greedy_summary(pairs, completions, score_fn, n_samples, metrics_fn, group_by, ids)
    if sample_k:
        summary.update(_sampled_eval(trainer, pairs, score_fn, sample_k))
    return summary


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _evaluate_episodes(trainer: Trainer, pairs: Sequence[Any], n_samples: int) -> dict[str, Any]:
    """One greedy episode per pair: the usual summary (each sample's completion is its whole
    transcript after the prompt, `env_info` its turns' infos where a step gave one, and
    `env_episode_info` what the environment said at the episode's end) plus
    success_rate, turns_mean, env_step_s and env_errors."""
    cfg = trainer.cfg.sampling.model_copy(update={"group_size": 1})
    chunks = _chunks(pairs, EVAL_PROMPTS_PER_BATCH)
    outs = trainer.play_episodes(chunks, cfg, [None] * len(chunks), greedy=True)
    transcripts = [transcript_text(r.transcript, trainer.stop) for o in outs for r in o.results]
    scored = Rewards.concat([episode_rewards(o.results, o.env_wait_s) for o in outs])
    summary = summarise_eval(
        [p.prompt for p in pairs], [None] * len(pairs), transcripts, scored.values,
        scored.statuses, n_samples, scored.usable,
    )  # fmt: skip
    summary.update(episode_figures(scored.stats))
    summary.update(own_env_metrics(trainer.episodes, scored, None))  # this rank's episodes
    results = [r for o in outs for r in o.results]
    for sample, result in zip(summary["samples"], results, strict=False):  # the first n_samples
        if any(result.infos):
            sample["env_info"] = result.infos  # each answered turn's info ({} where it gave none)
        if result.episode_info:
            sample["env_episode_info"] = result.episode_info
    return summary


def _complete(
    trainer: Trainer, pairs: Sequence[Any], k: int, greedy: bool, generator: torch.Generator | None = None
) -> tuple[list[str], list[list[int]] | None]:
    """k completions of each pair (rows pair after pair), decoded for the scorer, and their token
    ids where the rewards take them (else None)."""
    cfg = trainer.cfg.sampling.model_copy(update={"group_size": k})
    completions: list[str] = []
    ids: list[list[int]] = []
    for chunk in _chunks(pairs, max(1, EVAL_PROMPTS_PER_BATCH // k)):
        prompts = [trainer.tokenizer.encode_prompt(p.prompt) for p in chunk]
        with trainer.sampling_precision.autocast(), torch_threads(trainer.sampling_threads):
            rollout = generate(trainer.policy, prompts, cfg, generator=generator, greedy=greedy)
        rollout, texts = trainer.completions(rollout)
        completions.extend(texts)
        ids.extend(trainer.token_ids_for_rewards(rollout) or [])
    return completions, ids if trainer.reward_token_ids else None


def _sampled_eval(trainer: Trainer, pairs: Sequence[Any], score_fn, k: int) -> dict[str, Any]:
    """pass@1, pass@k and mean@k of k completions per pair at the training temperature."""
    generator = torch.Generator(device=trainer.device)
    generator.manual_seed(derived_seed(trainer.cfg.seed, -2, trainer.sft_steps, trainer.grpo_steps))
    completions, ids = _complete(trainer, pairs, k, greedy=False, generator=generator)
    return sampled_summary(pairs, completions, score_fn, k, trainer.cfg.grpo.eval_pass_reward, ids)
