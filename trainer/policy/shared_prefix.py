"""The GPT's forward over groups of rows that share a prompt: each prompt goes through the blocks once.

GRPO's log-prob passes (the reference's and the update's) take K completions of every prompt, laid
out group after group with the prompt's P columns repeated in each row. A plain forward computes
those columns K times over, giving K equal results. Here the prompt columns of each group and the
completion columns of every row are packed into one `[B*P + N*Lc, C]` matrix, so the linear layers,
layer norms and MLPs see each prompt column once; in attention the prompt's queries attend among
themselves, and each completion's queries attend to its group's prompt keys and values (broadcast
to the K rows) and to its own. The result equals the plain forward's up to float rounding;
gradients reach the shared prompt columns summed over the group, as the plain forward's do.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from trainer.policy.attention import attention_mask, mask_input, positions_from_mask


class Packing(NamedTuple):
    """How the packed rows split: B prompts of P columns, then N = B*K rows of Lc completion columns."""

    prompts: int  # B
    prefix: int  # P
    rows: int  # N
    completion: int  # Lc
    group_size: int  # K

    @property
    def prompt_rows(self) -> int:
        return self.prompts * self.prefix


class Packed(NamedTuple):
    """What a block needs besides its packed rows: their split and the two attention masks."""

    packing: Packing
    prompt_mask: Tensor  # the prompts' queries over their own keys
    completion_mask: Tensor  # each completion's queries over its prompt's keys and its own


def dropout_active(module: nn.Module) -> bool:
    """Whether `module` is training with a dropout that drops: shared prompt columns would then share
    one draw of its noise across the group, so the shared-prefix forward is not taken."""
    return module.training and any(
        m.p > 0 for m in module.modules() if isinstance(m, nn.modules.dropout._DropoutNd)
    )


def shared_inputs(
    ids: Tensor, position_ids: Tensor | None, attn_mask: Tensor | None, logits_to_keep: int
) -> tuple[Tensor, Tensor, int]:
    """The bool mask `[N, T]`, the positions and how many last columns' logits are kept, defaulted
    as a plain forward defaults them (every token real, positions counted from the mask, every
    column): what both policies' shared-prefix forwards take."""
    mask = torch.ones_like(ids, dtype=torch.bool) if attn_mask is None else attn_mask.bool()
    positions = positions_from_mask(mask) if position_ids is None else position_ids
    t = ids.shape[1]
    return mask, positions, min(logits_to_keep, t) if logits_to_keep > 0 else t


def check_groups(n: int, t: int, group_size: int, prefix_len: int) -> None:
    """ValueError unless `n` rows of `t` columns form groups of `group_size` with a prompt of
    `prefix_len` columns and at least one column after it."""
    if group_size < 1 or n % group_size:
        raise ValueError(f"{n} rows do not form groups of {group_size} (shared_prefix)")
    if not 1 <= prefix_len < t:
        raise ValueError(f"shared_prefix needs 1 <= prompt length ({prefix_len}) < sequence length ({t})")


def _attention(attn: nn.Module, h: Tensor, pk: Packing, masks: tuple[Tensor, Tensor]) -> Tensor:
    """The block's attention (a `trainer.policy.gpt.CausalSelfAttention`) over packed rows `h`
    `[M, C]` -> `[M, C]`."""
    c, heads = h.shape[-1], attn.n_head
    d = c // heads
    qkv = attn.c_attn(h)
    split = pk.prompt_rows
    # [rows, cols, 3, H, D] -> three [rows, H, cols, D]
    qp, kp, vp = qkv[:split].view(pk.prompts, pk.prefix, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)
    qc, kc, vc = qkv[split:].view(pk.rows, pk.completion, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)
    yp = attn.attend(qp, kp, vp, masks[0])

    def with_prompt(prompt: Tensor, own: Tensor) -> Tensor:
        # [B, H, P, D] broadcast over the group, then each row's own columns: [N, H, P+Lc, D]
        b, k = pk.prompts, pk.group_size
        shared = prompt.unsqueeze(1).expand(b, k, heads, pk.prefix, d)
        joined = torch.cat([shared, own.view(b, k, heads, pk.completion, d)], dim=3)
        return joined.view(pk.rows, heads, pk.prefix + pk.completion, d)

    yc = attn.attend(qc, with_prompt(kp, kc), with_prompt(vp, vc), masks[1])
    y = torch.cat([yp.transpose(1, 2).reshape(split, c), yc.transpose(1, 2).reshape(-1, c)])
    return attn.resid_dropout(attn.c_proj(y))


def packed_block(block: nn.Module, x: Tensor, packed: Packed) -> Tensor:
    """A `trainer.policy.gpt.Block` over packed rows `x` `[M, C]` -> `[M, C]` (what the block's
    forward runs when it is given `packed`)."""
    masks = (packed.prompt_mask, packed.completion_mask)
    x = x + _attention(block.attn, block.ln_1(x), packed.packing, masks)
    return x + block.mlp(block.ln_2(x))


def shared_prefix_hidden(
    model: nn.Module,
    idx: Tensor,
    position_ids: Tensor,
    attn_mask: Tensor,
    group_size: int,
    prefix_len: int,
    keep: int,
) -> Tensor:
    """Final hidden states (before `ln_f`) of the last `keep` columns `[N, keep, C]`, for rows
    `idx` `[N, T]` whose first `prefix_len` columns (ids, positions, mask) are the same within
    each group of `group_size` consecutive rows; `model` a `trainer.policy.gpt.GPT` (which calls
    this from its forward, so this module does not import it)."""
    n, t = idx.shape
    check_groups(n, t, group_size, prefix_len)
    pk = Packing(n // group_size, prefix_len, n, t - prefix_len, group_size)
    p, tr = prefix_len, model.transformer
    first = slice(None, None, group_size)  # each group's first row holds its prompt
    cols = torch.arange(t, device=idx.device)
    prompt_mask = mask_input(model.attention, attention_mask(attn_mask[first, :p], cols[:p], cols[:p]))
    completion_mask = mask_input(model.attention, attention_mask(attn_mask, cols[p:], cols))  # [N, 1, Lc, T]
    emb = torch.cat(
        [
            (tr.wte(idx[first, :p]) + tr.wpe(position_ids[first, :p])).reshape(pk.prompt_rows, -1),
            (tr.wte(idx[:, p:]) + tr.wpe(position_ids[:, p:])).reshape(n * pk.completion, -1),
        ]
    )
    x = tr.drop(emb)
    use_checkpoint = model.config.gradient_checkpointing and model.training
    packed = Packed(pk, prompt_mask, completion_mask)
    for block in tr.h:  # each block called as a module: FSDP gathers a sharded block in its forward
        if use_checkpoint:
            x = checkpoint(block, x, None, packed=packed, use_reentrant=False)
        else:
            x = block(x, None, packed=packed)
    completion = x[pk.prompt_rows :].view(n, pk.completion, -1)
    if keep <= pk.completion:
        return completion[:, pk.completion - keep :]
    prompt = x[: pk.prompt_rows].view(pk.prompts, p, -1)[:, p - (keep - pk.completion) :]
    return torch.cat([prompt.repeat_interleave(group_size, dim=0), completion], dim=1)
