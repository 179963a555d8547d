"""Held-out evaluation on one rank: greedy completions (and, for pass@k, k sampled ones per pair)
scored by the task's scorer, or one greedy episode per pair for an environment task.

It decodes with the trainer's live weights (`InProcessSampler`); `trainer.evaluation` turns what is
decoded into figures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from trainer.config import TrainerConfig
from trainer.evaluation import greedy_summary, sampled_summary, summarise_eval
from trainer.grpo.episode_rewards import episode_figures, episode_rewards, own_env_metrics
from trainer.grpo.reward_source import Rewards
from trainer.progress import Progress
from trainer.rng import derived_seed
from trainer.sampling.episodes import transcript_text
from trainer.sampling.in_process import InProcessSampler
from trainer.sampling.sampler_seam import PromptBatch

EVAL_PROMPTS_PER_BATCH = 64


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Evaluator:
    """Decodes and scores held-out pairs with `sampler`'s weights."""

    def __init__(self, sampler: InProcessSampler, cfg: TrainerConfig, progress: Progress) -> None:
        """cfg: the run's seed and grpo.eval_pass_reward; progress: the trainer's step counts, which
        seed the sampled completions of each evaluation."""
        self.sampler = sampler
        self.seed = cfg.seed
        self.pass_reward = cfg.grpo.eval_pass_reward
        self.progress = progress

    def evaluate(
        self,
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
        if self.sampler.episodes is not None:
            return self._evaluate_episodes(pairs, n_samples)
        completions, ids = self._complete(pairs, 1, greedy=True)
        summary = greedy_summary(pairs, completions, score_fn, n_samples, metrics_fn, group_by, ids)
        if sample_k:
            summary.update(self._sampled_eval(pairs, score_fn, sample_k))
        return summary

    def _evaluate_episodes(self, pairs: Sequence[Any], n_samples: int) -> dict[str, Any]:
        """One greedy episode per pair: the usual summary (each sample's completion is its whole
        transcript after the prompt, `env_info` its turns' infos where a step gave one, and
        `env_episode_info` what the environment said at the episode's end) plus
        success_rate, turns_mean, env_step_s and env_errors."""
        sampler = self.sampler
        outs = sampler.play_greedy([PromptBatch.of(c) for c in _chunks(pairs, EVAL_PROMPTS_PER_BATCH)])
        results = [r for o in outs for r in o.results]
        transcripts = [transcript_text(r.transcript, sampler.stop) for r in results]
        scored = Rewards.concat([episode_rewards(o.results, o.env_wait_s) for o in outs])
        summary = summarise_eval(
            [p.prompt for p in pairs], [None] * len(pairs), transcripts, scored.values,
            scored.statuses, n_samples, scored.usable,
        )  # fmt: skip
        summary.update(episode_figures(scored.stats))
        summary.update(own_env_metrics(sampler.episodes, scored, None))  # this rank's episodes
        for sample, result in zip(summary["samples"], results, strict=False):  # the first n_samples
            if any(result.infos):
                sample["env_info"] = result.infos  # each answered turn's info ({} where it gave none)
            if result.episode_info:
                sample["env_episode_info"] = result.episode_info
        return summary

    def _complete(
        self, pairs: Sequence[Any], k: int, greedy: bool, generator: torch.Generator | None = None
    ) -> tuple[list[str], list[list[int]] | None]:
        """k completions of each pair (rows pair after pair), decoded for the scorer, and their token
        ids where the rewards take them (else None)."""
        completions: list[str] = []
        ids: list[list[int]] = []
        for chunk in _chunks(pairs, max(1, EVAL_PROMPTS_PER_BATCH // k)):
            done = self.sampler.complete([p.prompt for p in chunk], k, generator=generator, greedy=greedy)
            completions.extend(done.texts)
            ids.extend(done.token_ids or [])
        return completions, ids if self.sampler.reward_token_ids else None

    def _sampled_eval(self, pairs: Sequence[Any], score_fn, k: int) -> dict[str, Any]:
        """pass@1, pass@k and mean@k of k completions per pair at the training temperature."""
        generator = torch.Generator(device=self.sampler.device)
        generator.manual_seed(derived_seed(self.seed, -2, self.progress.sft_steps, self.progress.grpo_steps))
        completions, ids = self._complete(pairs, k, greedy=False, generator=generator)
        return sampled_summary(pairs, completions, score_fn, k, self.pass_reward, ids)
