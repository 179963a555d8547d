"""What a training strategy does for the trainer: the seam between the policy and its ranks.

The trainer wraps its policy with a strategy (`ddp` replicates it on every rank, `fsdp` shards each
block of it over the ranks) and asks the strategy for everything that depends on where the weights
are: the module the update trains through, gradient accumulation without communication, the global
gradient norm, a context in which decoding reads whole weights, the KL reference, and state dicts
that hold every weight whole (checkpoints any world size, and either strategy, can load). The update,
the loss and the step records never learn which strategy runs.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from trainer.policy.base import Policy, Reference


class TrainingStrategy(Protocol):
    name: str

    def wrap(self, policy: Policy) -> nn.Module:
        """Place `policy.module` on the device, replicated or sharded over the ranks; returns the
        module a training forward runs through (DDP's wrapper, or the sharded module itself)."""
        ...

    def no_sync(self, skip: bool) -> AbstractContextManager:
        """With skip: a backward inside accumulates gradients on this rank without communicating."""
        ...

    def decoding(self) -> AbstractContextManager:
        """Inside, the policy's weights are whole on every rank (decoding reads them outside a
        module's forward). Collective under fsdp: every rank enters it together; re-entrant."""
        ...

    def grad_norm(self, grads: list[Tensor]) -> Tensor:
        """The 2-norm of the whole gradient (over every rank's shard), a plain 0-dim tensor."""
        ...

    def reference(self, policy: Policy, on_cpu: bool) -> Reference:
        """The frozen KL reference: the policy as it is now (a copy, or the policy with its adapter off)."""
        ...

    def reference_pass(self, ref: Reference) -> AbstractContextManager:
        """Where the reference computes for one pass (a copy kept on the CPU comes to the device)."""
        ...

    def model_state(self, module: nn.Module) -> dict[str, Tensor]:
        """Every weight of `module`, whole, for rank 0 to write (collective under fsdp; other
        ranks may get an empty dict)."""
        ...

    def load_model_state(self, module: nn.Module, state: dict[str, Tensor]) -> None:
        """Load whole weights (every rank holds them) into `module`, sharding them where it is sharded."""
        ...

    def optimizer_state(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimiser's state for rank 0 to write, whole (collective under fsdp)."""
        ...

    def load_optimizer_state(
        self, module: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        """Load an optimiser state written under either strategy, at any world size."""
        ...

    def record(self) -> dict[str, Any]:
        """What runtime.json says of the strategy (its name and the choices it made)."""
        ...
