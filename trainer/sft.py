"""Supervised warm start: teacher-forced cross-entropy on (prompt -> target) pairs.

Each pair becomes `BOS prompt SEP target EOS`; the loss covers the target characters and the EOS
only. A pair with `turns` (an environment's demonstration) is its transcript instead, the
environment's answers left out of the loss (`encode_turns`). Batches are right-padded, so plain causal attention is exact for every real token (a pad
only ever follows them) and the model's causal fast path applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IGNORE_INDEX = -100


class SFTBatch(NamedTuple):
    """A right-padded teacher-forcing batch; position t predicts labels[:, t]."""

    input_ids: Tensor  # [B, T] long: BOS prompt SEP target (EOS dropped: nothing follows it), then PAD
    labels: Tensor  # [B, T] long: the next token where it is in the loss, IGNORE_INDEX elsewhere
    num_tokens: int  # tokens in the loss (target characters + EOS of every row)


def encode_turns(tokenizer, prompt: str, turns: Sequence[tuple[str, str]]) -> tuple[list[int], list[bool]]:
    """An episode's transcript as the sampler lays it out: the prompt, then each turn's action (in
    the loss) and the environment's answer (context only, as in the GRPO loss); no EOS after it,
    as an episode ends when the environment says so."""
    ids = tokenizer.encode_prompt(prompt)
    mask = [False] * len(ids)
    for turn, (action, observation) in enumerate(turns):
        acted = tokenizer.encode_text(action)
        last = turn == len(turns) - 1  # the answer that ends an episode is never fed to the policy
        answered = [] if last else tokenizer.encode_observation(observation)
        ids += acted + answered
        mask += [True] * len(acted) + [False] * len(answered)
    return ids, mask


def build_sft_batch(pairs: Sequence[Any], tokenizer, device: torch.device | str, max_len: int) -> SFTBatch:
    """Encode `pairs` (objects with `.prompt` and `.target` strings) into one right-padded batch.

    max_len: the model's block_size; a pair longer than that is an error (never silently cut).
    """
    if len(pairs) == 0:
        raise ValueError("build_sft_batch needs at least one pair")
    rows, masks = [], []
    for i, pair in enumerate(pairs):
        try:
            prompt, target = pair.prompt, pair.target
        except AttributeError:
            raise TypeError(f"pair {i} must have .prompt and .target, got {type(pair).__name__}") from None
        turns = getattr(pair, "turns", None)
        ids, loss_mask = (
            encode_turns(tokenizer, prompt, turns) if turns else tokenizer.encode_pair(prompt, target)
        )
        if len(ids) - 1 > max_len:
            raise ValueError(
                f"pair {i} needs {len(ids) - 1} positions (BOS + prompt + SEP + target), more than "
                f"model.block_size={max_len}: {prompt!r} -> {target!r}"
            )
        rows.append(ids)
        masks.append(loss_mask)
    width = max(len(r) for r in rows) - 1
    ids_rows, label_rows = [], []
    for ids, mask in zip(rows, masks, strict=True):
        pad = width - (len(ids) - 1)
        ids_rows.append(ids[:-1] + [tokenizer.pad_id] * pad)
        label_rows.append(
            [t if m else IGNORE_INDEX for t, m in zip(ids[1:], mask[1:], strict=True)] + [IGNORE_INDEX] * pad
        )
    num_tokens = sum(sum(mask[1:]) for mask in masks)
    input_ids = torch.tensor(ids_rows, dtype=torch.long)  # [B, T]
    labels = torch.tensor(label_rows, dtype=torch.long)  # [B, T]
    device = torch.device(device)
    pin = device.type == "cuda"
    return SFTBatch(
        input_ids=(input_ids.pin_memory() if pin else input_ids).to(device, non_blocking=True),
        labels=(labels.pin_memory() if pin else labels).to(device, non_blocking=True),
        num_tokens=num_tokens,
    )


def sft_loss_sum(model: nn.Module, batch: SFTBatch) -> Tensor:
    """Summed (not averaged) cross-entropy over the batch's loss tokens; a 0-dim float32 tensor.

    The caller divides by the token count of the whole step (all micro-batches and ranks).
    """
    logits = model(batch.input_ids)  # [B, T, V]
    return F.cross_entropy(
        logits.flatten(0, 1).float(), batch.labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
    )
