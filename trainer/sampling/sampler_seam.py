"""The sampler seam: a batch of prompts in, completions with their sampler log-probs out, under a
given policy version.

`trainer.rollouts.Rollouts` sees a sampler only through `Sampler`. The trainer's own rank
implements it in process (`trainer.sampling.in_process.InProcessSampler`: the live weights decode
where they train). A sampler in another process implements the same calls: it holds the weights of
a named version (sent to it, and checked, by whoever trains them), and samples a step's prompts
under the version it is asked for. A row's noise is keyed by (seed, version, prompt index in the
step, sample index), not by the batch or the process it is sampled in (`trainer.sampling.row_noise`),
so where a prompt is sampled does not change its tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from trainer.sampling.episodes import EpisodeHost, Episodes
from trainer.sampling.rollout import Rollout


class PromptBatch(NamedTuple):
    """One micro-batch of a step's prompts (B of them)."""

    prompts: Sequence[str]  # [B] the prompts' text
    first_index: int  # prompts[b] is prompt first_index + b of the step (its rows' noise keys)
    rows: Sequence[Mapping[str, Any]] = ()  # [B] each prompt's data fields: an environment's row

    @classmethod
    def of(cls, pairs: Sequence[Any], first_index: int = 0) -> PromptBatch:
        """The batch of `pairs` (objects with `.prompt`, and `.fields` where they carry data fields)."""
        return cls([p.prompt for p in pairs], first_index, [getattr(p, "fields", None) or {} for p in pairs])


class Completions(NamedTuple):
    """K completions of each of B prompts, N = B*K rows laid out group after group."""

    rollout: Rollout  # ids [N, P+L]; old_logprobs [N, L]: the sampler's log-probs, 0 after each row's end
    texts: list[str]  # [N] each row's text as the rewards read it (up to EOS or its first stop string)
    token_ids: list[list[int]] | None  # [N] each row's sampled ids up to its end, where rewards take them


class Sampler(Protocol):
    """Turns a batch of prompts into completions with their sampler log-probs under a given
    policy version (GRPO steps taken by the weights that sample)."""

    # Where an environment task's episodes run; None: each sample is one completion.
    episodes: EpisodeHost | None

    def sample(self, batch: PromptBatch, version: int) -> Completions:
        """sampling.group_size completions of each prompt of `batch` under the weights of `version`;
        row r of prompt first_index + b draws the noise keyed (seed, version, first_index + b, r)."""
        ...

    def play(self, batches: Sequence[PromptBatch], version: int) -> list[Episodes]:
        """Each batch's episodes (sampling.group_size per prompt, played against `episodes`) under
        the weights of `version`, their rows' noise keyed as in `sample`."""
        ...
