"""A nanoGPT-style decoder: learned positions, pre-LN blocks, GELU MLP, tied embeddings.

The model never chooses a device or a dtype: the caller moves it and wraps calls in autocast.
Left-padded batches are supported through `attn_mask` (pads are never attended to and do not
count as positions) and incremental decoding through a `KVCache`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from trainer.model_config import BuiltinModelConfig
from trainer.policy.attention import attention_mask, eager_attention, mask_input, positions_from_mask
from trainer.policy.kv_cache import KVCache
from trainer.policy.linear_kernel import KernelLinear, step_linear
from trainer.policy.shared_prefix import (
    Packed,
    dropout_active,
    packed_block,
    shared_inputs,
    shared_prefix_hidden,
)


def _norm(ln: nn.LayerNorm, x: Tensor) -> Tensor:
    return F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: BuiltinModelConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = KernelLinear(config.n_embd, 3 * config.n_embd)
        self.c_proj = KernelLinear(config.n_embd, config.n_embd)
        self.attn_dropout = nn.Dropout(config.dropout)  # a module, so switching dropout off reaches it
        self.resid_dropout = nn.Dropout(config.dropout)
        self.implementation = "sdpa"  # or "eager" (`trainer.policy.attention`); set by GPT.set_attention

    def forward(
        self, x: Tensor, mask: Tensor | None, kv_cache: KVCache | None, layer: int, cols: Tensor | None
    ) -> Tensor:
        """x `[B, T, C]`; mask `[B, 1, T, Tk]` bool or None for plain causal attention."""
        b, t, c = x.shape
        # [B, T, 3, H, D] -> three [B, H, T, D]
        q, k, v = self.c_attn(x).view(b, t, 3, self.n_head, c // self.n_head).permute(2, 0, 3, 1, 4).unbind(0)
        if kv_cache is not None:
            k, v = kv_cache.write(layer, cols, k, v)  # [B, H, Tk, D]
            q = q.to(k.dtype)
        y = self.attend(q, k, v, mask)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, c)))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Attention's output `[B, H, T, D]` of q `[B, H, T, D]` over k, v `[B, H, Tk, D]`."""
        dropout_p = self.attn_dropout.p if self.training else 0.0
        if self.implementation == "eager":
            return eager_attention(q, k, v, mask, dropout_p)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=mask is None
        )


class MLP(nn.Module):
    def __init__(self, config: BuiltinModelConfig) -> None:
        super().__init__()
        self.c_fc = KernelLinear(config.n_embd, 4 * config.n_embd)
        self.c_proj = KernelLinear(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.c_fc.gelu(x)))


class Block(nn.Module):
    def __init__(self, config: BuiltinModelConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        kv_cache: KVCache | None = None,
        layer: int = 0,
        cols: Tensor | None = None,
        packed: Packed | None = None,
    ) -> Tensor:
        """packed: x holds rows packed for a shared-prefix forward (`trainer.policy.shared_prefix`);
        it comes through this forward so that a wrapper of the block (FSDP's) sees the call."""
        if packed is not None:
            return packed_block(self, x, packed)
        x = x + self.attn(self.ln_1(x), mask, kv_cache, layer, cols)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Decoder-only transformer over `vocab_size` token ids, at most `config.block_size` positions."""

    def __init__(self, config: BuiltinModelConfig, vocab_size: int) -> None:
        super().__init__()
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        self.config = config
        self.vocab_size = vocab_size
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(vocab_size, config.n_embd),
                "wpe": nn.Embedding(config.block_size, config.n_embd),
                "drop": nn.Dropout(config.dropout),
                "h": nn.ModuleList(Block(config) for _ in range(config.n_layer)),
                "ln_f": nn.LayerNorm(config.n_embd),
            }
        )
        self.lm_head = nn.Linear(config.n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied: one matrix for input and output
        self.attention = "sdpa"  # every block's attention implementation (`set_attention`)
        self.apply(self._init_weights)
        # GPT-2: residual projections scaled down so the residual stream's variance does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def set_attention(self, implementation: str) -> None:
        """'sdpa' (torch's fused kernel) or 'eager' (explicit matmuls): `trainer.policy.attention`."""
        if implementation not in ("sdpa", "eager"):
            raise ValueError(f"attention implementation must be 'sdpa' or 'eager', got {implementation!r}")
        self.attention = implementation
        for block in self.transformer.h:
            block.attn.implementation = implementation

    def set_linear_kernel(self, kernel: str) -> None:
        """'torch' or 'onednn': how the blocks' linear layers multiply in fp32 on a CPU
        (`trainer.policy.linear_kernel`)."""
        if kernel not in ("torch", "onednn"):
            raise ValueError(f"linear kernel must be 'torch' or 'onednn', got {kernel!r}")
        for module in self.modules():
            if isinstance(module, KernelLinear):
                module.kernel = kernel

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; `non_embedding` leaves out the token and position embeddings.

        The tied lm_head shares the token embedding, so it is never counted twice.
        """
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.transformer.wte.weight.numel() + self.transformer.wpe.weight.numel()
        return n

    def estimate_flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs per token (forward + backward), as in the PaLM paper / nanoGPT's MFU.

        6 * (matmul weights, including the tied lm_head) + 12 * n_layer * n_embd * seq_len for
        attention scores and values; `seq_len` defaults to block_size.
        """
        cfg = self.config
        t = cfg.block_size if seq_len is None else seq_len
        matmul_params = self.num_params(non_embedding=True) + self.transformer.wte.weight.numel()
        return 6.0 * matmul_params + 12.0 * cfg.n_layer * cfg.n_embd * t

    def forward(
        self,
        idx: Tensor,
        position_ids: Tensor | None = None,
        attn_mask: Tensor | None = None,
        kv_cache: KVCache | None = None,
        logits_to_keep: int = 0,
        shared_prefix: tuple[int, int] | None = None,
    ) -> Tensor:
        """Logits `[B, T, V]` (float32, also under autocast) for token ids `idx` `[B, T]`.

        position_ids `[B, T]`: defaults to counting real tokens of `attn_mask` (or 0..T-1).
        attn_mask `[B, T]` bool: True for real tokens, False for pads (never attended to).
        kv_cache: the tokens are written at the cache's shared position, which then advances by T;
        with a cache and a mask, pass position_ids (the cache alone cannot tell them).
        Without mask and cache, attention uses the causal fast path (flash kernels on GPU).
        logits_to_keep > 0: logits of the last that many positions only `[B, logits_to_keep, V]`
        (the lm-head is skipped elsewhere; `transformers` names the same argument so).
        shared_prefix (group_size K, prompt length P): rows come in groups of K that share their first
        P columns; each group's prompt goes through the blocks once (`trainer.policy.shared_prefix`).
        Taken without a cache and while no dropout is active (shared columns would share its noise).
        """
        b, t = idx.shape
        if kv_cache is None and t > self.config.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.config.block_size}")
        if shared_prefix is not None and kv_cache is None and not dropout_active(self):
            return self._shared_forward(idx, position_ids, attn_mask, logits_to_keep, shared_prefix)
        cols, mask = None, None
        if kv_cache is not None:
            cols, key_valid, key_cols = kv_cache.open(t, attn_mask)  # cols [T]: written by this call
            if t == 1 and attn_mask is None:
                mask = key_valid[:, None, None, :]  # one real query at the newest column: any valid key
            else:
                mask = attention_mask(key_valid, cols, key_cols)
            if position_ids is None:
                if attn_mask is not None:
                    raise ValueError("forward with kv_cache and attn_mask needs explicit position_ids")
                position_ids = cols.unsqueeze(0).expand(b, t)
        else:
            if attn_mask is not None:
                cols = torch.arange(t, device=idx.device)
                mask = attention_mask(attn_mask.bool(), cols, cols)
                if position_ids is None:
                    position_ids = positions_from_mask(attn_mask)
            elif position_ids is None:
                position_ids = torch.arange(t, device=idx.device).unsqueeze(0)
        mask = mask_input(self.attention, mask)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(position_ids))
        use_checkpoint = self.config.gradient_checkpointing and self.training and kv_cache is None
        for layer, block in enumerate(self.transformer.h):
            if use_checkpoint:
                x = checkpoint(block, x, mask, use_reentrant=False)
            else:
                x = block(x, mask, kv_cache, layer, cols)
        if kv_cache is not None:
            kv_cache.advance(t)
        if logits_to_keep > 0:
            x = x[:, -logits_to_keep:]
        return self.head(self.transformer.ln_f(x))

    def decode_one(self, tokens: Tensor, position_ids: Tensor, kv_cache: KVCache) -> Tensor:
        """One decoding step: next-token logits `[N, V]` of tokens `[N]` at positions `[N]`, their
        keys and values written to the cache. The arithmetic of `forward` with the cache and one
        column, without its module calls and general masks, which are much of a small model's decode
        step. Eval mode: no dropout."""
        tr, (n,) = self.transformer, tokens.shape
        # functional calls instead of the norms' and embeddings' module calls (no hook dispatch)
        x = F.embedding(tokens, tr.wte.weight) + F.embedding(position_ids, tr.wpe.weight)  # [N, C]
        c = x.shape[-1]
        cols, key_valid, _ = kv_cache.open(1, None)
        valid = key_valid[:, None, None, :]  # the newest column sees every valid key
        mask = mask_input(self.attention, valid)
        linear = step_linear(tr.h[0].attn.c_attn, x)  # n_layer >= 1
        for layer, block in enumerate(tr.h):
            attn = block.attn
            h = _norm(block.ln_1, x)
            qkv = linear(attn.c_attn, h).view(n, 3, attn.n_head, 1, c // attn.n_head)
            q, k, v = qkv.unbind(1)  # [N, H, 1, D]
            k, v = kv_cache.write(layer, cols, k, v)
            y = attn.attend(q.to(k.dtype), k, v, mask).view(n, c)
            x = x + linear(attn.c_proj, y)
            x = x + linear(block.mlp.c_proj, linear(block.mlp.c_fc, _norm(block.ln_2, x), True))
        kv_cache.advance(1)
        return self.head(_norm(tr.ln_f, x))

    def _shared_forward(
        self,
        idx: Tensor,
        position_ids: Tensor | None,
        attn_mask: Tensor | None,
        logits_to_keep: int,
        shared_prefix: tuple[int, int],
    ) -> Tensor:
        mask, positions, keep = shared_inputs(idx, position_ids, attn_mask, logits_to_keep)
        hidden = shared_prefix_hidden(self, idx, positions, mask, *shared_prefix, keep)
        return self.head(self.transformer.ln_f(hidden))

    def head(self, hidden: Tensor) -> Tensor:
        """float32 logits from final hidden states, autocast or not: log-probs for the GRPO ratio
        and the KL must not carry a bf16 rounding of the logits (up to 0.06 nats per token)."""
        with torch.autocast(hidden.device.type, enabled=False):
            return F.linear(hidden.float(), self.lm_head.weight.float())
