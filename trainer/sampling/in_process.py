"""The `Sampler` of one trainer rank: the policy's live weights decode in the trainer's own process.

Besides the seam's calls (`sample`, `play`), it decodes what a held-out evaluation asks for (greedy
completions, k sampled ones with a generator, greedy episodes), and it keeps what decoding runs
under: the decoding precision (`trainer.precision.decoding_precision`), the torch thread count
(`scaling.sampling_threads`, timed by `time_threads`) and, for benchmarks, fixed-length rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from trainer.config import SamplingConfig
from trainer.policy.base import Policy
from trainer.sampling.decode_threads import DecodeThreads, time_decode_threads
from trainer.sampling.episodes import EpisodeBatch, EpisodeHost, Episodes, generate_episode_batches
from trainer.sampling.rollout import Rollout, completion_token_ids, completions_text
from trainer.sampling.row_noise import row_keys
from trainer.sampling.sampler import generate
from trainer.sampling.sampler_seam import Completions, PromptBatch
from trainer.sampling.stop import apply_stop_strings
from trainer.threads import torch_threads

if TYPE_CHECKING:
    from trainer.precision import Precision


class InProcessSampler:
    """Decoding with `policy` on `device`, under the `precision` decoding takes."""

    def __init__(
        self,
        policy: Policy,
        cfg: SamplingConfig,
        precision: Precision,
        seed: int,
        device: torch.device,
        *,
        stop: Sequence[str] = (),
        episodes: EpisodeHost | None = None,
        reward_token_ids: bool = False,
        weights: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ) -> None:
        """stop: the task's stop strings (a completion, or an episode's turn, ends at the first one:
        `trainer.sampling.stop`). episodes: where an environment task's episodes run. reward_token_ids:
        each completion comes with its sampled ids (`Completions.token_ids`). weights: a context in
        which the policy's weights are whole (a sharded policy gathered: `TrainingStrategy.decoding`),
        entered around each decoding."""
        self.policy = policy
        self.tokenizer = policy.tokenizer
        self.cfg = cfg
        self.precision = precision
        self.seed = seed
        self.device = device
        self.stop = tuple(stop)
        self.episodes = episodes
        self.reward_token_ids = reward_token_ids
        self.weights = weights
        self.threads: int | None = None  # torch threads while decoding; None: as set for the process
        self.fixed_length = False  # benchmarks: every row decodes max_new_tokens, EOS ignored (equal work)

    # ----------------------------------------------------------------- the seam (`Sampler`)
    def sample(self, batch: PromptBatch, version: int) -> Completions:
        """`Sampler.sample`: the live weights are the caller's, of the version it names."""
        keys = self._row_keys(batch, version)
        return self.complete(
            batch.prompts, self.cfg.group_size, row_keys=keys, stop_at_eos=not self.fixed_length
        )

    def play(self, batches: Sequence[PromptBatch], version: int) -> list[Episodes]:
        """`Sampler.play`: the episodes of each batch, decoded two batches at a time where the host
        answers asynchronously (`generate_episode_batches`)."""
        keyed = [EpisodeBatch(b.prompts, b.rows, self._row_keys(b, version)) for b in batches]
        return self._play(keyed, self.cfg, greedy=False)

    def _row_keys(self, batch: PromptBatch, version: int) -> Tensor:
        """`[B*K]` the noise keys of the batch's rows (`trainer.sampling.row_noise`)."""
        k, step = self.cfg.group_size, batch.noise_step(version)
        return row_keys(self.seed, step, batch.first_index, len(batch.prompts), k, self.device)

    # ----------------------------------------------------------------- any decoding of these weights
    def complete(
        self,
        prompts: Sequence[str],
        k: int,
        *,
        row_keys: Tensor | None = None,
        generator: torch.Generator | None = None,
        greedy: bool = False,
        stop_at_eos: bool = True,
    ) -> Completions:
        """k completions of each prompt, at the sampling config's temperature and length; the rows'
        noise from row_keys `[B*k]`, else from `generator` (`trainer.sampling.sampler.generate`)."""
        cfg = self.cfg if k == self.cfg.group_size else self.cfg.model_copy(update={"group_size": k})
        ids = [self.tokenizer.encode_prompt(p) for p in prompts]
        with self.weights(), self.precision.autocast(), torch_threads(self.threads):
            rollout = generate(
                self.policy,
                ids,
                cfg,
                generator=generator,
                greedy=greedy,
                stop_at_eos=stop_at_eos,
                row_keys=row_keys,
            )
        rollout, texts = self.cut(rollout)
        token_ids = completion_token_ids(rollout) if self.reward_token_ids else None
        return Completions(rollout, texts, token_ids)

    def play_greedy(self, batches: Sequence[PromptBatch]) -> list[Episodes]:
        """One greedy episode of each prompt of each batch (a held-out evaluation's)."""
        cfg = self.cfg.model_copy(update={"group_size": 1})
        return self._play([EpisodeBatch(b.prompts, b.rows) for b in batches], cfg, greedy=True)

    def _play(self, batches: Sequence[EpisodeBatch], cfg: SamplingConfig, greedy: bool) -> list[Episodes]:
        if self.episodes is None:
            raise ValueError("episodes are played only for an environment task (no episode host given)")
        with self.weights(), self.precision.autocast(), torch_threads(self.threads):
            return generate_episode_batches(
                self.policy, self.episodes, batches, cfg, self.stop, greedy=greedy
            )

    def cut(self, rollout: Rollout) -> tuple[Rollout, list[str]]:
        """Each row's text for the rewards, and the rollout ending where that text ends (EOS or a
        stop string)."""
        if self.stop:
            return apply_stop_strings(rollout, self.tokenizer, self.stop)
        return rollout, completions_text(rollout, self.tokenizer)

    def recorded_texts(self, rollout: Rollout) -> list[str]:
        """Each row's text as a person reads it: the rewards' text, or an episode's whole transcript."""
        if self.episodes is not None:
            return completions_text(rollout, self.tokenizer)
        return self.cut(rollout)[1]

    def time_threads(self, prompt: str, candidates: Sequence[int]) -> DecodeThreads:
        """Time a short greedy decode of `prompt` under each thread count, and decode with the
        fastest from now on (`trainer.sampling.decode_threads`)."""
        ids = self.tokenizer.encode_prompt(prompt)
        with self.weights(), self.precision.autocast():
            chosen = time_decode_threads(self.policy, ids, self.cfg, candidates)
        self.threads = chosen.threads
        return chosen
