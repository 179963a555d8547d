"""Sampling noise that belongs to a row, not to a batch.

Each sampled row is keyed by (seed, step, prompt index in the step, sample index), and the noise
of its token t is a counter-based hash of (key, t, vocabulary id): no generator state is shared
between rows. So how a step's prompts are cut into micro-batches, or spread over ranks, does not
change which tokens a row draws (only float differences in the logits of another batch shape
can, at a near tie). Tokens are drawn by the Gumbel-max trick: argmax(log p + Gumbel noise) is a
sample of softmax(log p), the same distribution as `torch.multinomial`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.rng import derived_seed

_M32 = 0xFFFFFFFF
_MUL = 0x45D9F3B  # < 2**31: a product with a 32-bit value stays inside int64
_STEP_MUL = 0x2545F491
_VOCAB_MUL = 0x27D4EB2F


def _mix32_(x: Tensor) -> Tensor:
    """A 32-bit integer hash (int64 tensors holding values in [0, 2**32)), computed in place in
    `x`, which must be a fresh tensor of the caller's: one scratch tensor instead of ten
    temporaries the size of a whole block of decoding noise."""
    shifted = torch.empty_like(x)
    for last in (False, False, True):
        torch.bitwise_right_shift(x, 16, out=shifted)
        x.bitwise_xor_(shifted)
        if not last:
            x.mul_(_MUL).bitwise_and_(_M32)
    return x


def row_keys(
    seed: int, step: int, first_prompt: int, n_prompts: int, k: int, device: torch.device | str
) -> Tensor:
    """`[n_prompts * k]` int64 keys of rows laid out group after group, for prompts
    first_prompt .. first_prompt + n_prompts - 1 of a step's batch."""
    prompts = torch.tensor(
        [derived_seed(seed, step, first_prompt + i) & _M32 for i in range(n_prompts)], dtype=torch.int64
    )
    samples = torch.arange(k, dtype=torch.int64)
    keys = _mix32_(prompts.unsqueeze(1) ^ _mix32_(samples + 1).unsqueeze(0))  # [B, K]
    return keys.reshape(-1).to(device)


def gumbel_noise(keys: Tensor, t: int | Tensor, vocab: int) -> Tensor:
    """`[N, vocab]` float32 Gumbel(0, 1) noise of decoding step t for rows with `keys` `[N]`;
    with t a `[S]` tensor of steps, `[S, N, vocab]` (the same values, in one pass)."""
    steps = torch.as_tensor(t, dtype=torch.int64, device=keys.device)
    step = _mix32_(keys ^ ((steps.reshape(-1, 1) + 1) * _STEP_MUL & _M32))  # [S, N]
    ids = (torch.arange(vocab, device=keys.device, dtype=torch.int64) + 1) * _VOCAB_MUL & _M32
    bits = _mix32_(_mix32_(step.unsqueeze(-1) ^ ids) ^ step.unsqueeze(-1))  # [S, N, V]
    u = bits.double().add_(0.5).div_(2.0**32)  # in (0, 1)
    noise = u.log_().neg_().log_().neg_().float()  # -log(-log(u))
    return noise if steps.dim() else noise[0]


class StepNoise:
    """Each decoding step's noise, made for many steps at once: one pass of ~20 tensor ops per
    block of steps instead of per step (a decoding step of a small model is mostly such overhead).
    A block holds at most `max_elements` values, so a large vocabulary falls back to one step."""

    def __init__(self, keys: Tensor, vocab: int, steps: int, max_elements: int = 1 << 22) -> None:
        self.keys, self.vocab, self.steps = keys, vocab, steps
        self.block = max(1, min(steps, max_elements // max(1, keys.numel() * vocab)))
        self.start, self.noise = 0, gumbel_noise(keys, torch.arange(0), vocab)

    def __call__(self, t: int) -> Tensor:
        if not self.start <= t < self.start + self.noise.shape[0]:
            self.start = t
            stop = min(self.steps, t + self.block)
            self.noise = gumbel_noise(self.keys, torch.arange(t, stop), self.vocab)
        return self.noise[t - self.start]
