"""The sampler seam: a batch of prompts in, completions with their sampler log-probs out, under a
given policy version.

`trainer.rollouts.Rollouts` sees a sampler only through `Sampler`. The trainer's own rank
implements it in process (`trainer.sampling.in_process.InProcessSampler`: the live weights decode
where they train). A row's noise is keyed by (seed, step, prompt index in the step, sample index),
not by the batch or the process it is sampled in (`trainer.sampling.row_noise`), so where a prompt
is sampled does not change its tokens; the step is the policy version unless a batch says otherwise.

Samplers apart from the trainer (`SamplerApart`: Ray actors, `actors.sampling`; an inference engine
could be another) take whole steps: the trainer publishes the weights of each policy version once,
requests a step's batch under a version (`StepRequest`), and receives its completions, the sampler's
log-probs and the rewards, with a digest of the weights that sampled them (`SampledStep`), which it
checks against what it published (`trainer.rollouts_apart.RolloutsApart`). Their side of it is
`trainer.sampling.versioned.VersionedSampler`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from trainer.grpo.reward_source import Rewards
from trainer.sampling.episodes import EpisodeHost, Episodes
from trainer.sampling.rollout import Rollout


class PromptBatch(NamedTuple):
    """One micro-batch of a step's prompts (B of them)."""

    prompts: Sequence[str]  # [B] the prompts' text
    first_index: int  # prompts[b] is prompt first_index + b of the step (its rows' noise keys)
    rows: Sequence[Mapping[str, Any]] = ()  # [B] each prompt's data fields: an environment's row
    step: int | None = None  # the GRPO step whose batch this is (its rows' noise key); None: the version

    @classmethod
    def of(cls, pairs: Sequence[Any], first_index: int = 0, step: int | None = None) -> PromptBatch:
        """The batch of `pairs` (objects with `.prompt`, and `.fields` where they carry data fields)."""
        fields = [getattr(p, "fields", None) or {} for p in pairs]
        return cls([p.prompt for p in pairs], first_index, fields, step)

    def noise_step(self, version: int) -> int:
        """The step its rows' noise is keyed by when sampled under `version`."""
        return version if self.step is None else self.step


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
        row r of prompt first_index + b draws the noise keyed (seed, batch.noise_step(version),
        first_index + b, r)."""
        ...

    def play(self, batches: Sequence[PromptBatch], version: int) -> list[Episodes]:
        """Each batch's episodes (sampling.group_size per prompt, played against `episodes`) under
        the weights of `version`, their rows' noise keyed as in `sample`."""
        ...


class StepRequest(NamedTuple):
    """One rank's share of a GRPO step's batch, to be sampled apart from the trainer."""

    step: int  # the GRPO step that trains on it (its rows' noise key)
    version: int  # the policy version whose weights sample it
    pairs: Sequence[Any]  # the rank's pairs (`.prompt`, `.target`, `.fields`)
    first_index: int  # pairs[i] is prompt first_index + i of the step


class SampledStep(NamedTuple):
    """A `StepRequest` sampled and scored."""

    step: int
    version: int  # the policy version it was sampled under
    digest: str  # of the weights that sampled it, as the sampler holding them computed it
    rollouts: list[Rollout]  # each micro-batch's rollout, in order; old_logprobs are the sampler's
    rewards: Rewards  # every row's reward, in row order
    failure_reasons: Sequence[str] = ()  # the first reasons of the step's failed rewards


class SamplerApart(Protocol):
    """Samplers in other processes, fed whole steps; one per trainer rank, holding its own samplers."""

    def publish(self, version: int, weights: Mapping[str, Any]) -> str:
        """Send the trainable weights of `version` (whole, on the CPU) to every sampler; returns
        their digest (`trainer.sampling.weights_digest`). Requests under `version` may follow."""
        ...

    def release(self, version: int) -> None:
        """No request under `version` will follow: the samplers may drop its weights."""
        ...

    def request(self, request: StepRequest) -> None:
        """Start sampling a step's share; returns at once."""
        ...

    def receive(self, step: int) -> SampledStep:
        """The requested step, once sampled and scored (a sampler lost meanwhile is replaced and
        its part sampled again, under the same weights and noise keys)."""
        ...
