"""What one rank holds of the policy's training state: parameter, gradient and optimiser bytes.

Counted from the tensors themselves (a sharded tensor by its local shard), so a test and the
benchmark read the same figures the memory plan estimates (`service.memory_plan`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor


def _local_bytes(t: Tensor) -> int:
    local = t.to_local() if isinstance(t, DTensor) else t
    return local.numel() * local.element_size()


def rank_state_bytes(module: nn.Module, optimizers: Iterable[torch.optim.Optimizer] = ()) -> dict[str, int]:
    """{"params", "grads", "optimizer", "total"}: bytes this rank holds of `module`'s parameters
    (tied ones once), of their gradients and of the optimisers' state tensors."""
    params = list(module.parameters())
    counts = {
        "params": sum(_local_bytes(p) for p in params),
        "grads": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer": sum(
            _local_bytes(v)
            for opt in optimizers
            for state in opt.state.values()
            for v in state.values()
            if isinstance(v, Tensor) and v.dim() > 0
        ),
    }
    counts["total"] = sum(counts.values())
    return counts
