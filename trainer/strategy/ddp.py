"""`scaling.strategy: ddp`: the whole policy, its gradients and AdamW's moments on every rank.

At world size 1 nothing wraps the module; above it, DistributedDataParallel all-reduces the
gradients (averaged over the ranks) in the backward pass. Checkpoints hold the module's own
state dict and the optimiser's, which `trainer.strategy.optimizer_state` names for a sharded run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from trainer.policy.base import Policy, Reference
from trainer.strategy.optimizer_state import is_named, to_numbered


class DDPStrategy:
    """The policy replicated on `world` ranks (DDP above one)."""

    name = "ddp"

    def __init__(self, device: torch.device, world: int) -> None:
        self.device = device
        self.world = world
        self.ddp: DistributedDataParallel | None = None

    def wrap(self, policy: Policy) -> nn.Module:
        module = policy.module.to(self.device)
        if self.world == 1:
            return module
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(module, device_ids=ids)
        return self.ddp

    def no_sync(self, skip: bool) -> contextlib.AbstractContextManager:
        """DDP's own no_sync on all but the last micro-batch of an optimiser step."""
        return self.ddp.no_sync() if (self.ddp is not None and skip) else contextlib.nullcontext()

    def decoding(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()  # every rank holds the whole policy

    def grad_norm(self, grads: list[Tensor]) -> Tensor:
        return torch.nn.utils.get_total_norm(grads, error_if_nonfinite=False, foreach=True)

    def reference(self, policy: Policy, on_cpu: bool) -> Reference:
        return policy.reference(on_cpu)

    @contextlib.contextmanager
    def reference_pass(self, ref: Reference) -> Iterator[None]:
        """A copy kept on the CPU (`grpo.ref_on_cpu`) computes on the device, then goes back."""
        moved = ref.is_copy and self.device.type != "cpu" and _on_cpu(ref.module)
        if moved:
            ref.module.to(self.device)
        try:
            yield
        finally:
            if moved:
                ref.module.to("cpu")

    def model_state(self, module: nn.Module) -> dict[str, Tensor]:
        return module.state_dict()

    def load_model_state(self, module: nn.Module, state: dict[str, Tensor]) -> None:
        module.load_state_dict(state)

    def optimizer_state(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_optimizer_state(
        self, module: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        optimizer.load_state_dict(to_numbered(state, module, optimizer) if is_named(state) else state)

    def record(self) -> dict[str, Any]:
        return {"strategy": self.name}


def _on_cpu(module: nn.Module) -> bool:
    first = next(module.parameters(), None)
    return first is not None and first.device.type == "cpu"
