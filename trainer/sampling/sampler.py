"""Sampling K completions per prompt: the usual bottleneck of GRPO.

Prompts are left-padded to a common length P, so every row writes its next token to the same
cache column and all shapes stay static while decoding. Each prompt is prefilled once and its
keys/values copied to its K rows; then the N = B*K rows decode together. The loop keeps host
syncs out of the hot path: outputs are preallocated, the stop check runs every few steps on GPU,
and EOS masking is done once at the end.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

from trainer.compile import maybe_compile
from trainer.config import SamplingConfig
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT, positions_from_mask
from trainer.policy.kv_cache import KVCache
from trainer.sampling.rollout import Rollout, completions_text
from trainer.sampling.row_noise import gumbel_noise

__all__ = ["Rollout", "completions_text", "decode_step", "generate", "left_pad", "sample_tokens"]

# Steps between checks that every row has stopped (each check is a host sync on GPU).
STOP_CHECK_EVERY_CUDA = 8

Step = Callable[[Tensor, int], Tensor]  # (tokens [N], step index) -> next logits [N, V]


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Prompts right-aligned in `[B, P]` (P = longest prompt) and their real-token mask `[B, P]`."""
    p = max(len(x) for x in prompts)
    ids = torch.full((len(prompts), p), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), p), dtype=torch.bool)
    for row, x in enumerate(prompts):
        if len(x):
            ids[row, p - len(x) :] = torch.as_tensor(x, dtype=torch.long)
            mask[row, p - len(x) :] = True
    return ids.to(device), mask.to(device)


def sample_tokens(
    logits: Tensor,
    temperature: float,
    top_k: int | None,
    greedy: bool,
    generator: torch.Generator | None,
    noise: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Next tokens `[N]` from logits `[N, V]` and their log-probs `[N]` (float32).

    noise `[N, V]`: each row's own Gumbel noise (`trainer.sampling.row_noise`); the token is then
    argmax(scaled logits + noise) over the top_k, and `generator` is not used.
    The log-prob is under softmax(logits / temperature) over the whole vocabulary, whatever top_k
    or greedy chose: that is what a later forward pass recomputes for the GRPO importance ratio.
    """
    scaled = logits.float() / temperature
    logp = torch.log_softmax(scaled, dim=-1)
    if greedy:
        tokens = scaled.argmax(dim=-1)
    elif noise is not None:
        if top_k is not None and top_k < scaled.shape[-1]:
            kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        tokens = (scaled + noise).argmax(dim=-1)
    else:
        if top_k is not None and top_k < scaled.shape[-1]:
            kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
            probs = torch.softmax(scaled.masked_fill(scaled < kth, float("-inf")), dim=-1)
        else:
            probs = logp.exp()
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return tokens, logp.gather(1, tokens.unsqueeze(1)).squeeze(1)


def decode_step(model: GPT, tokens: Tensor, position_ids: Tensor, cache: KVCache) -> Tensor:
    """One cached decoding step: tokens `[N]` at positions `[N]` -> next-token logits `[N, V]`.

    Static shapes and no Python values read from tensors, so it compiles with fullgraph=True and
    replays as a CUDA graph.
    """
    return model(tokens.unsqueeze(1), position_ids.unsqueeze(1), kv_cache=cache)[:, -1]


@functools.lru_cache(maxsize=8)
def _decode_step_fn(device: torch.device, compile_: bool, cuda_graphs: bool) -> Callable:
    mode = "reduce-overhead" if cuda_graphs else None
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
            cls.cache = KVCache.for_model(c, n, c.block_size, device=device, dtype=dtype)
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


def _cached_decoder(
    model: GPT, ids: Tensor, mask: Tensor, cfg: SamplingConfig, max_len: int
) -> tuple[Tensor, Step]:
    """Prefill B prompts once, share their cache with K rows each; return first logits and a step."""
    device, k = ids.device, cfg.group_size
    dtype = _compute_dtype(model, device)
    prefix = KVCache.for_model(model.config, ids.shape[0], ids.shape[1], device=device, dtype=dtype)
    first = model(ids, positions_from_mask(mask), mask, kv_cache=prefix)[:, -1]  # [B, V]
    step_fn = _decode_step_fn(device, cfg.compile, cfg.cuda_graphs)
    compiled = step_fn is not decode_step
    n = ids.shape[0] * k
    if compiled:
        cache = _StaticCacheSlot.get(model, n, device, dtype)
    else:
        cache = KVCache.for_model(model.config, n, max_len, device=device, dtype=dtype)
    cache.load_repeated(prefix, k)
    next_pos = mask.sum(1).repeat_interleave(k)  # [N] position of the first completion token
    mark_step = compiled and cfg.cuda_graphs

    def step(tokens: Tensor, t: int) -> Tensor:
        if mark_step:
            torch.compiler.cudagraph_mark_step_begin()
        logits = step_fn(model, tokens, next_pos, cache)
        next_pos.add_(1)
        return logits

    return first.repeat_interleave(k, dim=0), step


def _full_decoder(
    model: GPT, ids: Tensor, mask: Tensor, cfg: SamplingConfig, max_len: int
) -> tuple[Tensor, Step]:
    """No cache: every step runs the model over the whole sequence so far (the baseline)."""
    k, (b, p) = cfg.group_size, ids.shape
    seq = torch.zeros((b * k, max_len), dtype=torch.long, device=ids.device)
    seq[:, :p] = ids.repeat_interleave(k, dim=0)
    seq_mask = torch.ones_like(seq, dtype=torch.bool)
    seq_mask[:, :p] = mask.repeat_interleave(k, dim=0)
    seq_pos = positions_from_mask(seq_mask)
    first = model(seq[:, :p], seq_pos[:, :p], seq_mask[:, :p])[:, -1]

    def step(tokens: Tensor, t: int) -> Tensor:
        end = p + t + 1
        seq[:, end - 1] = tokens
        return model(seq[:, :end], seq_pos[:, :end], seq_mask[:, :end])[:, -1]

    return first, step


def _decode_loop(
    first: Tensor,
    step: Step,
    cfg: SamplingConfig,
    eos_id: int,
    greedy: bool,
    stop_at_eos: bool,
    generator: torch.Generator | None,
    keys: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Raw sampled tokens `[N, L]` and their log-probs `[N, L]`; L < max_new_tokens on early stop.

    keys `[N]`: per-row noise keys (`row_noise.row_keys`) instead of `generator`."""
    n, steps, device = first.shape[0], cfg.max_new_tokens, first.device
    tokens = torch.empty((n, steps), dtype=torch.long, device=device)
    logps = torch.empty((n, steps), dtype=torch.float32, device=device)
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    check_every = STOP_CHECK_EVERY_CUDA if device.type == "cuda" else 1  # a CPU check costs no sync
    logits = first
    for t in range(steps):
        noise = None if (keys is None or greedy) else gumbel_noise(keys, t, logits.shape[-1])
        tok, logp = sample_tokens(logits, cfg.temperature, cfg.top_k, greedy, generator, noise)
        tokens[:, t] = tok
        logps[:, t] = logp
        if t + 1 == steps:
            break
        if stop_at_eos:
            finished |= tok == eos_id
            if (t + 1) % check_every == 0 and bool(finished.all()):
                return tokens[:, : t + 1], logps[:, : t + 1]
        logits = step(tok, t)
    return tokens, logps


def _validate(
    model: GPT, prompts: Sequence[Sequence[int]], cfg: SamplingConfig, tokenizer: CharTokenizer
) -> None:
    if not prompts:
        raise ValueError("generate needs at least one prompt, got an empty list")
    if any(isinstance(p, str) for p in prompts):
        raise ValueError("prompts must be token id lists (use tokenizer.encode_prompt), got a str")
    empty = [i for i, p in enumerate(prompts) if len(p) == 0]
    if empty:
        raise ValueError(
            f"prompts must be non-empty token lists (use tokenizer.encode_prompt); empty: {empty[:5]}"
        )
    if tokenizer.vocab_size != model.vocab_size:
        raise ValueError(
            f"tokenizer vocab_size {tokenizer.vocab_size} != model vocab_size {model.vocab_size}"
        )
    bad = [i for i, p in enumerate(prompts) if min(p) < 0 or max(p) >= model.vocab_size]
    if bad:
        raise ValueError(
            f"prompt token ids must lie in [0, {model.vocab_size}); prompts out of range: {bad[:5]}"
        )
    longest = max(len(p) for p in prompts)
    if longest + cfg.max_new_tokens > model.config.block_size:
        raise ValueError(
            f"longest prompt ({longest} tokens) + sampling.max_new_tokens ({cfg.max_new_tokens}) "
            f"exceeds model.block_size ({model.config.block_size})"
        )


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Sampling never uses dropout; the caller's train/eval mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _assemble(
    ids: Tensor,
    mask: Tensor,
    tokens: Tensor,
    logps: Tensor,
    k: int,
    eos_id: int,
    pad_id: int,
    stop_at_eos: bool,
) -> Rollout:
    """Mask everything after each row's first EOS and lay the rows out as a Rollout."""
    if stop_at_eos:
        is_eos = tokens == eos_id
        after_eos = (is_eos.long().cumsum(1) - is_eos.long()) > 0  # [N, L] strictly after the first EOS
        completion_mask = ~after_eos
        tokens = tokens.masked_fill(after_eos, pad_id)
    else:
        completion_mask = torch.ones_like(tokens, dtype=torch.bool)
    attn_mask = torch.cat([mask.repeat_interleave(k, dim=0), completion_mask], dim=1)
    return Rollout(
        input_ids=torch.cat([ids.repeat_interleave(k, dim=0), tokens], dim=1),
        attn_mask=attn_mask,
        position_ids=positions_from_mask(attn_mask),
        completion_mask=completion_mask,
        old_logprobs=logps.masked_fill(~completion_mask, 0.0),
        prompt_len=ids.shape[1],
        group_size=k,
    )


def generate(
    model: GPT,
    prompts: Sequence[Sequence[int]],
    cfg: SamplingConfig,
    tokenizer: CharTokenizer,
    generator: torch.Generator | None = None,
    *,
    greedy: bool = False,
    stop_at_eos: bool = True,
    row_keys: Tensor | None = None,
) -> Rollout:
    """Sample cfg.group_size completions for each prompt (ids from `tokenizer.encode_prompt`).

    greedy: argmax decoding (evaluation); old_logprobs still use cfg.temperature.
    stop_at_eos=False: every row runs max_new_tokens steps (benchmarks with equal lengths).
    row_keys `[B*K]`: each row's own noise (`trainer.sampling.row_noise`), so that a row's tokens do
    not depend on the batch it is sampled in; `generator` is then unused.
    Runs under no_grad (not inference_mode: the rollout's tensors feed the training forward)
    and in eval mode; autocast, if wanted, is the caller's.
    """
    _validate(model, prompts, cfg, tokenizer)
    if row_keys is not None and tuple(row_keys.shape) != (len(prompts) * cfg.group_size,):
        raise ValueError(
            f"row_keys must be [B*K] = [{len(prompts) * cfg.group_size}], got {tuple(row_keys.shape)}"
        )
    device = model.transformer.wte.weight.device
    if generator is not None and generator.device.type != device.type:
        raise ValueError(f"generator is on {generator.device}, the model on {device}")
    ids, mask = left_pad(prompts, tokenizer.pad_id, device)
    max_len = ids.shape[1] + cfg.max_new_tokens
    make_decoder = _cached_decoder if cfg.use_kv_cache else _full_decoder
    with torch.no_grad(), _eval_mode(model):
        first, step = make_decoder(model, ids, mask, cfg, max_len)
        tokens, logps = _decode_loop(
            first, step, cfg, tokenizer.eos_id, greedy, stop_at_eos, generator, row_keys
        )
    return _assemble(
        ids, mask, tokens, logps, cfg.group_size, tokenizer.eos_id, tokenizer.pad_id, stop_at_eos
    )
