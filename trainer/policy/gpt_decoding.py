"""Decoding the built-in GPT: its own preallocated KV cache, one prefill per prompt shared by K rows.

Every row writes its next token to the same cache column, so all shapes stay static while decoding
(what torch.compile and CUDA graphs need); `_full_decoder` is the cache-less baseline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

from trainer.compile import maybe_compile
from trainer.config import SamplingConfig
from trainer.policy.attention import positions_from_mask
from trainer.policy.base import Step
from trainer.policy.gpt import GPT
from trainer.policy.kv_cache import KVCache


def decode_step(model: GPT, tokens: Tensor, position_ids: Tensor, cache: KVCache) -> Tensor:
    """One cached decoding step: tokens `[N]` at positions `[N]` -> next-token logits `[N, V]`.

    Static shapes and no Python values read from tensors, so it compiles with fullgraph=True and
    replays as a CUDA graph.
    """
    return model.decode_one(tokens, position_ids, cache)


@functools.lru_cache(maxsize=8)
def _decode_step_fn(device: torch.device, compile_: bool, cuda_graphs: bool) -> Callable:
    mode = "reduce-overhead" if cuda_graphs and device.type == "cuda" else None  # CUDA graphs: CUDA only
    return maybe_compile(
        decode_step,
        device=device,
        enabled=compile_,
        what="the decode step",
        mode=mode,
        fullgraph=True,
        dynamic=False,
    )


class _StaticCacheSlot:
    """One decode cache kept between calls while compiled: a new cache object or shape would
    make the compiled step recompile, and new buffer addresses would re-record CUDA graphs."""

    cache: KVCache | None = None
    key: tuple | None = None

    @classmethod
    def get(cls, model: GPT, n: int, device: torch.device, dtype: torch.dtype) -> KVCache:
        c = model.config
        key = (c.n_layer, c.n_head, c.n_embd, c.block_size, n, device, dtype)
        if cls.key != key:
            cls.cache = None  # free the old buffers before allocating new ones
            cls.cache = KVCache.for_model(c, n, c.block_size, device=device, dtype=dtype, static=True)
            for t in cls.cache.tensors():
                torch._dynamo.mark_static_address(t)
            cls.key = key
        return cls.cache


def release_static_cache() -> None:
    """Free the decode cache kept for the compiled path."""
    _StaticCacheSlot.cache, _StaticCacheSlot.key = None, None


def _compute_dtype(model: GPT, device: torch.device) -> torch.dtype:
    """Dtype of keys/values: the autocast dtype when autocast is on, else the weights' dtype."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return model.transformer.wte.weight.dtype


def cached_decoder(
    model: GPT, ids: Tensor, mask: Tensor, cfg: SamplingConfig, max_len: int
) -> tuple[Tensor, Step]:
    """Prefill B prompts once, share their cache with K rows each; return first logits and a step."""
    device, k = ids.device, cfg.group_size
    dtype = _compute_dtype(model, device)
    prefix = KVCache.for_model(model.config, ids.shape[0], ids.shape[1], device=device, dtype=dtype)
    first = model(ids, positions_from_mask(mask), mask, kv_cache=prefix, logits_to_keep=1)[:, -1]  # [B, V]
    step_fn = _decode_step_fn(device, cfg.compile, cfg.cuda_graphs)
    compiled = step_fn is not decode_step
    n = ids.shape[0] * k
    if compiled:
        cache = _StaticCacheSlot.get(model, n, device, dtype)
    else:
        cache = KVCache.for_model(model.config, n, max_len, device=device, dtype=dtype)
    cache.load_repeated(prefix, k)
    next_pos = mask.sum(1).repeat_interleave(k)  # [N] position of the first completion token
    mark_step = compiled and cfg.cuda_graphs and device.type == "cuda"

    def step(tokens: Tensor, t: int) -> Tensor:
        if mark_step:
            torch.compiler.cudagraph_mark_step_begin()
        logits = step_fn(model, tokens, next_pos, cache)
        next_pos.add_(1)
        return logits

    return first.repeat_interleave(k, dim=0), step


def full_decoder(
    model: torch.nn.Module, ids: Tensor, mask: Tensor, cfg: SamplingConfig, max_len: int
) -> tuple[Tensor, Step]:
    """No cache: every step runs the model over the whole sequence so far (the baseline).

    `model` is any module with the policy forward `(ids, position_ids, attn_mask, logits_to_keep=0) -> logits`.
    """
    k, (b, p) = cfg.group_size, ids.shape
    seq = torch.zeros((b * k, max_len), dtype=torch.long, device=ids.device)
    seq[:, :p] = ids.repeat_interleave(k, dim=0)
    seq_mask = torch.ones_like(seq, dtype=torch.bool)
    seq_mask[:, :p] = mask.repeat_interleave(k, dim=0)
    seq_pos = positions_from_mask(seq_mask)
    first = model(seq[:, :p], seq_pos[:, :p], seq_mask[:, :p], logits_to_keep=1)[:, -1]

    def step(tokens: Tensor, t: int) -> Tensor:
        end = p + t + 1
        seq[:, end - 1] = tokens
        return model(seq[:, :end], seq_pos[:, :end], seq_mask[:, :end], logits_to_keep=1)[:, -1]

    return first, step
