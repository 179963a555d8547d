"""The run's schedule, a pure function of the global step: phase, data window, evaluations, checkpoints.

Steps are numbered 1, 2, ... on one counter over both phases: SFT steps 1..S take `sft.batch_size`
pairs each, GRPO steps S+1..S+G take `grpo.prompts_per_step` each, from one stream of pair indices.
A resumed run therefore continues at exactly the right data position, and every rank agrees
without communicating. Evaluations are due at the end of SFT (the GRPO start), every
`grpo.eval_every` GRPO steps and at the last step; a checkpoint every `checkpoint.every_steps`
steps, at the last step and when the run stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainer.config import TrainerConfig

Phase = Literal["sft", "grpo"]
EvalKind = Literal["start", "periodic", "final"]


@dataclass(frozen=True)
class Schedule:
    sft_steps: int
    grpo_steps: int
    sft_batch: int = 1  # pairs per SFT step
    grpo_prompts: int = 1  # prompts per GRPO step
    eval_every: int = 1  # GRPO steps between periodic evaluations
    checkpoint_every: int = 1

    @classmethod
    def of(cls, cfg: TrainerConfig) -> Schedule:
        return cls(
            sft_steps=cfg.sft.steps,
            grpo_steps=cfg.grpo.steps,
            sft_batch=cfg.sft.batch_size,
            grpo_prompts=cfg.grpo.prompts_per_step,
            eval_every=cfg.grpo.eval_every,
            checkpoint_every=cfg.checkpoint.every_steps,
        )

    @property
    def total(self) -> int:
        """Global steps of the run: SFT steps, then GRPO steps."""
        return self.sft_steps + self.grpo_steps

    def grpo_step(self, index: int) -> int:
        """The global step of the GRPO step numbered `index` from 0."""
        return self.sft_steps + index + 1

    def phase_of(self, step: int) -> Phase:
        """'sft' for steps up to sft_steps (step 0 included: the policy before any GRPO), 'grpo' after."""
        return "sft" if step <= self.sft_steps else "grpo"

    def step_window(self, step: int) -> tuple[Phase, int, int]:
        """(phase, first pair index, number of pairs) of global step `step` (1-based)."""
        if step < 1:
            raise ValueError(f"steps are numbered from 1, got {step}")
        if step > self.total:
            raise ValueError(f"step {step} is past the last step {self.total}")
        if step <= self.sft_steps:
            return "sft", (step - 1) * self.sft_batch, self.sft_batch
        first = self.sft_steps * self.sft_batch + (step - self.sft_steps - 1) * self.grpo_prompts
        return "grpo", first, self.grpo_prompts

    def eval_due(self, step: int) -> EvalKind | None:
        """Kind of the held-out evaluation after global step `step`, or None."""
        if step == self.total:
            return "final"
        if self.grpo_steps and step == self.sft_steps:
            return "start"
        if step > self.sft_steps and (step - self.sft_steps) % self.eval_every == 0:
            return "periodic"
        return None

    def checkpoint_due(self, step: int, stopping: bool = False) -> bool:
        """After `step`: every `checkpoint_every` steps, at the last step, and when the run stops."""
        return stopping or step == self.total or step % self.checkpoint_every == 0

    def remaining(self, step: int) -> dict[Phase, int]:
        """Steps of each phase still to run after `step`."""
        return {
            "sft": max(0, self.sft_steps - step),
            "grpo": min(self.grpo_steps, self.total - step),
        }
