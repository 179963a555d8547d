"""Shuffled mini-batches of one step's rows, and the rows of a rollout a mini-batch takes.

A step's rows are spread over micro-batches (rollouts of different prompt lengths). A mini-batch
is a set of row indices into the step's rows, taken from every micro-batch it touches without
re-padding (`select_rows`). Rows in the loss are shuffled and dealt round-robin, then the rows out
of it (dropped groups), so every mini-batch holds its share of the loss whenever there are at
least as many rows in it as mini-batches, and every rank's mini-batch j has the same row count.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from trainer.sampling.rollout import Rollout


def minibatch_rows(in_loss: Tensor, minibatches: int, generator: torch.Generator) -> list[Tensor]:
    """`minibatches` sorted index tensors partitioning range(N), for in_loss `[N]` bool (on the host)."""
    n = in_loss.numel()
    if not 1 <= minibatches <= n:
        raise ValueError(
            f"grpo.minibatches ({minibatches}) must be between 1 and the rows of a rank's step ({n})"
        )
    kept = torch.nonzero(in_loss, as_tuple=True)[0]
    rest = torch.nonzero(~in_loss, as_tuple=True)[0]
    order = torch.cat(
        [
            kept[torch.randperm(kept.numel(), generator=generator)],
            rest[torch.randperm(rest.numel(), generator=generator)],
        ]
    )
    return [order[j::minibatches].sort().values for j in range(minibatches)]


def split_by_rollout(rows: Tensor, sizes: Sequence[int]) -> list[Tensor]:
    """Global row indices `rows` -> per-rollout local indices (empty where a rollout has none)."""
    out, start = [], 0
    for size in sizes:
        local = rows[(rows >= start) & (rows < start + size)] - start
        out.append(local)
        start += size
    return out


def select_rows(rollout: Rollout, rows: Tensor) -> Rollout:
    """The rollout restricted to `rows` (indices on the host); the same object when it is every row."""
    if rows.numel() == rollout.num_rows and bool((rows == torch.arange(rollout.num_rows)).all()):
        return rollout
    idx = rows.to(rollout.input_ids.device)
    return rollout._replace(
        input_ids=rollout.input_ids[idx],
        attn_mask=rollout.attn_mask[idx],
        position_ids=rollout.position_ids[idx],
        completion_mask=rollout.completion_mask[idx],
        old_logprobs=rollout.old_logprobs[idx],
        group_size=1,  # the rows need not be whole groups any more
    )
