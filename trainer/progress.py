"""How far training has gone: the optimiser steps taken in each phase.

The trainer owns one `Progress` and counts its steps in it; its collaborators read it. The GRPO
count is the policy version: the rows of a step's samples draw noise keyed by it
(`trainer.sampling.row_noise`), and with the SFT count it seeds an evaluation's sampled completions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Progress:
    sft_steps: int = 0  # SFT optimiser steps taken
    grpo_steps: int = 0  # GRPO steps taken: the version of the policy's weights
