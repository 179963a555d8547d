"""Each group's prompt once through a `transformers` model: through its own KV cache.

The built-in GPT packs prompt and completion columns into one forward
(`trainer.policy.shared_prefix`); a `transformers` model is not ours to change, but its cache
gives the same saving. The prompts (one row per group) run with `use_cache=True`; their keys and
values, repeated for the group's K rows (`Cache.batch_repeat_interleave`, differentiable), are the
past of a second forward over the completion columns, with the full 2D mask and explicit
positions. Gradients reach the prompt's computation through the cached keys and values, summed
over the group. The logits equal the plain forward's within float rounding; what is saved grows
with the prompt's share of the columns.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from trainer.policy.hf_cache import cache_kwarg, output_cache
from trainer.policy.shared_prefix import check_groups


def shared_prefix_logits(
    model: nn.Module,
    ids: Tensor,
    position_ids: Tensor,
    attn_mask: Tensor,
    group_size: int,
    prefix_len: int,
    keep: int,
) -> Tensor:
    """Logits `[N, keep, V]` of the last `keep` columns of rows `ids` `[N, T]` whose first
    `prefix_len` columns (ids, positions, mask) are the same within each group of `group_size`
    consecutive rows; `model` a `transformers` causal LM."""
    n, t = ids.shape
    check_groups(n, t, group_size, prefix_len)
    p, first = prefix_len, slice(None, None, group_size)  # each group's first row holds its prompt
    mask = attn_mask.long()
    own = t - p  # the completion columns
    from_prompt = max(0, keep - own)  # columns of the prompt whose logits are kept
    prompt = model(
        input_ids=ids[first, :p], attention_mask=mask[first, :p], position_ids=position_ids[first, :p],
        use_cache=True, logits_to_keep=max(1, from_prompt),
    )  # fmt: skip
    cache = output_cache(prompt)
    cache.batch_repeat_interleave(group_size)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # under peft's wrapper
    rest = model(
        input_ids=ids[:, p:], attention_mask=mask, position_ids=position_ids[:, p:],
        use_cache=True, logits_to_keep=min(keep, own), **{cache_kwarg(base): cache},
    ).logits  # fmt: skip
    if not from_prompt:
        return rest
    head = prompt.logits[:, -from_prompt:].repeat_interleave(group_size, dim=0)
    return torch.cat([head, rest], dim=1)
