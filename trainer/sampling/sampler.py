"""Sampling K completions per prompt: the usual bottleneck of GRPO.

Prompts are left-padded to a common length P, so every row writes its next token to the same
cache column and all shapes stay static while decoding. Each prompt is prefilled once and its
keys/values copied to its K rows (`sampling.prefill=shared`; `per_row` prefills each row's own copy,
the ablation); then the N = B*K rows decode together. The loop keeps host
syncs out of the hot path: outputs are preallocated, the stop check runs every few steps on GPU,
and EOS masking is done once at the end.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from trainer.config import SamplingConfig
from trainer.policy.attention import positions_from_mask
from trainer.policy.base import Policy, Step, eval_mode
from trainer.policy.builtin import BuiltinPolicy
from trainer.policy.gpt import GPT
from trainer.policy.gpt_decoding import decode_step, release_static_cache
from trainer.sampling.rollout import Rollout, completions_text
from trainer.sampling.row_noise import StepNoise

__all__ = [
    "Rollout",
    "check_prompts",
    "completions_text",
    "decode_step",
    "generate",
    "lay_out",
    "left_pad",
    "prefill",
    "release_static_cache",
    "sample_tokens",
]

# Steps between checks that every row has stopped (each check is a host sync on GPU).
STOP_CHECK_EVERY_CUDA = 8


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
    scaled = logits.float() if temperature == 1.0 else logits.float() / temperature  # no division at 1
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
    step_noise = None if (keys is None or greedy) else StepNoise(keys, logits.shape[-1], steps)
    for t in range(steps):
        noise = None if step_noise is None else step_noise(t)
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


def check_prompts(policy: Policy, prompts: Sequence[Sequence[int]], cfg: SamplingConfig) -> None:
    """ValueError (one line) for prompts the sampler cannot take: empty, out of the vocabulary, or
    leaving no room for max_new_tokens."""
    if not prompts:
        raise ValueError("generate needs at least one prompt, got an empty list")
    if any(isinstance(p, str) for p in prompts):
        raise ValueError("prompts must be token id lists (use tokenizer.encode_prompt), got a str")
    empty = [i for i, p in enumerate(prompts) if len(p) == 0]
    if empty:
        raise ValueError(
            f"prompts must be non-empty token lists (use tokenizer.encode_prompt); empty: {empty[:5]}"
        )
    vocab = policy.vocab_size
    bad = [i for i, p in enumerate(prompts) if min(p) < 0 or max(p) >= vocab]
    if bad:
        raise ValueError(f"prompt token ids must lie in [0, {vocab}); prompts out of range: {bad[:5]}")
    longest = max(len(p) for p in prompts)
    if longest + cfg.max_new_tokens > policy.max_positions:
        raise ValueError(
            f"longest prompt ({longest} tokens) + sampling.max_new_tokens ({cfg.max_new_tokens}) "
            f"exceeds {policy.positions_key} ({policy.max_positions})"
        )


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
    return lay_out(ids, mask, tokens, logps, completion_mask, completion_mask, k)


def lay_out(
    ids: Tensor, mask: Tensor, tokens: Tensor, logps: Tensor, completion_mask: Tensor, real: Tensor, k: int
) -> Rollout:
    """The Rollout of prompts ids/mask `[B, P]` (each repeated for its k rows) and the rows' tokens
    `[N, L]`: `real` says which completion tokens are attended to, `completion_mask` which are the
    policy's (their log-probs kept, the others' zeroed)."""
    attn_mask = torch.cat([mask.repeat_interleave(k, dim=0), real], dim=1)
    return Rollout(
        input_ids=torch.cat([ids.repeat_interleave(k, dim=0), tokens], dim=1),
        attn_mask=attn_mask,
        position_ids=positions_from_mask(attn_mask),
        completion_mask=completion_mask,
        old_logprobs=logps.masked_fill(~completion_mask, 0.0),
        prompt_len=ids.shape[1],
        group_size=k,
    )


def prefill(
    policy: Policy, ids: Tensor, mask: Tensor, cfg: SamplingConfig, max_len: int
) -> tuple[Tensor, Step]:
    """The decoder of `ids` `[B, P]`: the first logits `[B*K, V]` and the step.

    sampling.prefill=shared prefills each prompt once and the decoder copies its cache to the K rows;
    per_row repeats each prompt K times first, so every row prefills its own copy (rows come out in
    the same order, group after group).
    """
    k = cfg.group_size
    if cfg.prefill == "shared" or k == 1:
        return policy.decoder(ids, mask, cfg, max_len)
    single = cfg.model_copy(update={"group_size": 1})
    return policy.decoder(ids.repeat_interleave(k, dim=0), mask.repeat_interleave(k, dim=0), single, max_len)


def generate(
    model: Policy | GPT,
    prompts: Sequence[Sequence[int]],
    cfg: SamplingConfig,
    tokenizer=None,
    generator: torch.Generator | None = None,
    *,
    greedy: bool = False,
    stop_at_eos: bool = True,
    row_keys: Tensor | None = None,
) -> Rollout:
    """Sample cfg.group_size completions for each prompt (ids from `tokenizer.encode_prompt`).

    model: a policy (with its own tokenizer: `tokenizer` may be left out), or a bare GPT with its
    CharTokenizer. greedy: argmax decoding (evaluation); old_logprobs still use cfg.temperature.
    stop_at_eos=False: every row runs max_new_tokens steps (benchmarks with equal lengths).
    row_keys `[B*K]`: each row's own noise (`trainer.sampling.row_noise`), so that a row's tokens do
    not depend on the batch it is sampled in; `generator` is then unused.
    Decodes under inference_mode (no autograd bookkeeping on a decode step's few dozen small ops,
    a share of a small model's decoding), and the sampled tokens and log-probs are copied out of it,
    since the rollout feeds the training forward; a compiled step (`sampling.compile`) keeps its
    cache between calls, so it decodes under no_grad. In eval mode; autocast, if wanted, is the
    caller's.
    """
    policy = BuiltinPolicy(model, tokenizer) if isinstance(model, GPT) else model
    tokenizer = policy.tokenizer
    check_prompts(policy, prompts, cfg)
    if row_keys is not None and tuple(row_keys.shape) != (len(prompts) * cfg.group_size,):
        raise ValueError(
            f"row_keys must be [B*K] = [{len(prompts) * cfg.group_size}], got {tuple(row_keys.shape)}"
        )
    device = next(policy.module.parameters()).device
    if generator is not None and generator.device.type != device.type:
        raise ValueError(f"generator is on {generator.device}, the model on {device}")
    ids, mask = left_pad(prompts, tokenizer.pad_id, device)
    max_len = ids.shape[1] + cfg.max_new_tokens
    with torch.no_grad() if cfg.compile else torch.inference_mode(), eval_mode(policy.module):
        first, step = prefill(policy, ids, mask, cfg, max_len)
        tokens, logps = _decode_loop(
            first, step, cfg, tokenizer.eos_id, greedy, stop_at_eos, generator, row_keys
        )
    tokens, logps = tokens.clone(), logps.clone()  # ordinary tensors: the training forward takes them
    return _assemble(
        ids, mask, tokens, logps, cfg.group_size, tokenizer.eos_id, tokenizer.pad_id, stop_at_eos
    )
