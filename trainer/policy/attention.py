"""Attention by torch's fused kernel (`sdpa`) or by explicit matmuls (`eager`), `auto`'s choice
between them, and the masks and positions both take.

On CUDA the fused kernels (flash, memory-efficient) are the fast path. On a CPU computing in bf16 or
fp16 torch's fused kernel is the slow one: two batched matmuls and a softmax do the same arithmetic
several times faster, for a GRPO update's attention and for a decoding step's single query (about
9x and 3x on a 2-core AMD EPYC, Zen 5, torch 2.13). So `auto` takes `eager` there; the hf policy
maps the same choice onto transformers' own `attn_implementation`.

In fp32 the built-in GPT's eager attention adds its mask as one float32 bias made once per forward
(`mask_input`) and is faster than the fused kernel at short lengths, while transformers' eager
attention is level with sdpa. The eager scores, `[rows, heads, T, T]` per layer, are kept for the
backward, which the fused kernel avoids; so `auto` takes `eager` for the built-in GPT on a CPU up to
`EAGER_MAX_POSITIONS` positions, and `sdpa` everywhere else.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

ATTENTION_CHOICES = ("auto", "sdpa", "eager", "flash_attention_2")
# The built-in GPT in fp32 on a CPU takes eager attention up to this many positions: its scores,
# [rows, heads, T, T] per layer, are kept for the backward, which the fused kernel avoids.
EAGER_MAX_POSITIONS = 256


def attention_mask(key_valid: Tensor, query_cols: Tensor, key_cols: Tensor) -> Tensor:
    """Boolean SDPA mask `[N, 1, T, Tk]`: causal, real keys only, and always the query's own column.

    key_valid `[N, Tk]`; query_cols `[T]` and key_cols `[Tk]` are column numbers. Allowing the
    diagonal keeps a pad query from having no key at all (a fully masked row gives NaN in SDPA);
    pad queries' outputs are never used.
    """
    q = query_cols.unsqueeze(1)  # [T, 1]
    causal = key_cols <= q  # [T, Tk]
    own = key_cols == q  # [T, Tk]
    return (causal & (key_valid.unsqueeze(1) | own)).unsqueeze(1)


def positions_from_mask(attn_mask: Tensor) -> Tensor:
    """Position ids `[B, T]` counting real tokens only (a left pad gets 0, like the first token)."""
    return (attn_mask.long().cumsum(-1) - 1).clamp_(min=0)


def resolve_attention(
    setting: str, device: torch.device | str, dtype: str, builtin_positions: int | None = None
) -> tuple[str, str]:
    """(the implementation a run uses, why) for `model.attn_implementation` on `device` computing
    in `dtype`: `auto` made concrete, other settings unchanged. builtin_positions: the built-in
    GPT's block_size (None for another policy)."""
    if setting not in ATTENTION_CHOICES:
        raise ValueError(f"model.attn_implementation must be one of {ATTENTION_CHOICES}, got {setting!r}")
    if setting != "auto":
        return setting, "set in the config"
    on_cpu = torch.device(device).type == "cpu"
    if on_cpu and dtype in ("bf16", "fp16"):
        return "eager", f"auto: {dtype} on a CPU, where torch's fused attention kernel is slow"
    if on_cpu and builtin_positions is not None and builtin_positions <= EAGER_MAX_POSITIONS:
        return "eager", (
            f"auto: the built-in GPT on a CPU with at most {EAGER_MAX_POSITIONS} positions, where its "
            "explicit matmuls are faster than the fused kernel and the scores stay small"
        )
    return "sdpa", "auto: torch's fused attention kernel"


def mask_input(implementation: str, mask: Tensor | None) -> Tensor | None:
    """The mask as a model's blocks take it: the boolean mask for `sdpa`; for `eager` the additive
    float32 bias (0 or -inf) that `eager_attention` adds, made once per forward instead of per layer."""
    if mask is None or implementation != "eager":
        return mask
    return torch.where(mask, 0.0, float("-inf"))


def eager_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> Tensor:
    """softmax(q k^T / sqrt(d) + mask) v, as `F.scaled_dot_product_attention` computes it.

    q `[B, H, T, D]`, k and v `[B, H, Tk, D]`; mask `[B, 1, T, Tk]` bool (True: attend), or float32
    (added to the scaled scores: `mask_input`), or None for plain causal attention (query i sees
    keys 0..i, the queries being the last T keys). The softmax runs in float32 whatever the inputs'
    dtype, as the fused kernels accumulate it.
    """
    t, tk = q.shape[-2], k.shape[-2]
    scores = torch.matmul(q, k.transpose(-1, -2))
    scale = q.shape[-1] ** -0.5
    if mask is not None and mask.dtype != torch.bool:
        scores = torch.add(mask, scores, alpha=scale)  # one pass: scale, bias and float32
    else:
        if mask is None:
            mask = torch.ones(t, tk, dtype=torch.bool, device=q.device).tril(diagonal=tk - t)
        scores = (scores * scale).masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p)
    return torch.matmul(probs, v)
