"""The little the trainer needs from torch.distributed: rank, world size, sums, a gather, each
rank's share.

Everything degrades to a no-op when torch.distributed is not initialised (or has one process).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

T = TypeVar("T")


def rank_and_world() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(t: Tensor) -> Tensor:
    """`t` summed over ranks, in place (asynchronous on the GPU: no host sync); `t` itself at world 1."""
    if rank_and_world()[1] > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def reduce_on(t: Tensor, device: torch.device) -> Tensor:
    """Sum a host tensor over ranks through `device` (NCCL reduces device tensors only); back on CPU."""
    if rank_and_world()[1] == 1:
        return t
    backend = dist.get_backend()
    staged = t.to(device) if backend == "nccl" else t.clone()
    dist.all_reduce(staged, op=dist.ReduceOp.SUM)
    return staged.cpu()


def gather_json(obj: Any, device: torch.device) -> list[Any]:
    """Every rank's `obj` (anything JSON holds), in rank order; [obj] outside torch.distributed.

    Staged through `device` as reduce_on is (NCCL gathers device tensors only): two all_gathers,
    the lengths and then the padded bytes.
    """
    if rank_and_world()[1] == 1:
        return [obj]
    via = device if dist.get_backend() == "nccl" else torch.device("cpu")
    data = torch.tensor(list(json.dumps(obj).encode()), dtype=torch.uint8, device=via)
    size = torch.tensor([data.numel()], dtype=torch.int64, device=via)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8, device=via)
    padded[: data.numel()] = data
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return [json.loads(bytes(p[: int(s.item())].cpu().tolist())) for p, s in zip(parts, sizes, strict=True)]


def shard(items: Sequence[T], rank: int, world: int) -> list[T]:
    """This rank's share of a step's items: a contiguous chunk, rank r taking items[r*n/W:(r+1)*n/W].

    The number of items must divide by the world size: every rank then runs the same number of
    micro-batches, which DDP needs (each backward pass is a collective).
    """
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in a world of size {world}")
    n = len(items)
    if n % world:
        raise ValueError(f"{n} items per step do not divide among {world} ranks; use a multiple of {world}")
    per = n // world
    return list(items[rank * per : (rank + 1) * per])
