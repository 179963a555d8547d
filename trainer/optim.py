"""AdamW, the learning-rate schedule, and an optimiser step that skips non-finite updates without a host sync.

The skip uses the hook that `torch.amp.GradScaler` itself uses with fused optimisers: a 0-dim
`found_inf` tensor set on the optimiser before `step()`. When it is 1 the fused AdamW kernel
leaves parameters, both moments and the step count untouched; when it is 0 the update is the
ordinary one. The flag is computed on the device from the loss and the gradient norm, so the
host never waits for the GPU to decide. That is why AdamW is fused on CPU as well as CUDA
(both have fused kernels); foreach/for-loop AdamW would need a host-side `if`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor, nn

from trainer.config import LRSchedule, OptimConfig
from trainer.precision import Precision

if TYPE_CHECKING:
    from trainer.strategy.base import TrainingStrategy


class NonFiniteStepsError(RuntimeError):
    """Too many optimiser steps in a row had a non-finite loss or gradient norm."""


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: 2-D weights (matmuls, embeddings) decay; biases and LayerNorm gains do not.

    Tied parameters appear once (`named_parameters` de-duplicates them).
    """
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_adamw(
    model: nn.Module, lr: float, cfg: OptimConfig, device: torch.device | str
) -> torch.optim.AdamW:
    """Fused AdamW over `model` on `device` ('cpu' or 'cuda'), weight decay on 2-D weights only."""
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"AdamW: device type must be 'cpu' or 'cuda', got {device.type!r}")
    return torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=lr, betas=cfg.betas, fused=True)


def lr_at(
    step: int,
    base_lr: float,
    warmup_steps: int,
    schedule: LRSchedule = "constant",
    total_steps: int = 0,
    min_lr_ratio: float = 0.0,
) -> float:
    """The learning rate of optimiser step `step` (0-based).

    Linear warm-up over `warmup_steps` steps ((step + 1) / warmup_steps of base_lr), then with
    progress p = (step - warmup_steps) / (total_steps - warmup_steps) in [0, 1]:
    "constant": base_lr; "linear": base_lr * (m + (1 - m) * (1 - p)); "cosine": base_lr *
    (m + (1 - m) * (1 + cos(pi p)) / 2), m = min_lr_ratio (Hugging Face's schedules with a floor).
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if warmup_steps > 0 and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return base_lr
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if schedule == "linear":
        decay = 1.0 - progress
    elif schedule == "cosine":
        decay = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"lr schedule must be constant, linear or cosine, got {schedule!r}")
    return base_lr * (min_lr_ratio + (1.0 - min_lr_ratio) * decay)


class StepResult(NamedTuple):
    """Device scalars of one optimiser step (read them with the step's metrics, not one by one)."""

    grad_norm: Tensor  # 0-dim float: total gradient norm before clipping
    skipped: Tensor  # 0-dim float: 1.0 when the update was skipped (non-finite), else 0.0
    consecutive_skips: Tensor  # 0-dim long: skipped steps in a row, ending with this one


class GuardedOptimizer:
    """AdamW plus clipping plus the non-finite guard, with a host-side step counter for the schedule.

    The gradient norm (clipping, the guard) and the optimiser's state dict come from the training
    strategy that holds `model` (`trainer.strategy`): under fsdp each rank holds a shard of every
    gradient, and the norm and the state are the whole model's.

    The schedule advances on every attempted step, skipped or not (the host does not know which
    without a sync). `check_skips(consecutive)` is called by the trainer once the step's metrics
    are on the host, and raises `NonFiniteStepsError` after `max_consecutive_skips` in a row.
    """

    def __init__(
        self,
        model: nn.Module,
        base_lr: float,
        warmup_steps: int,
        cfg: OptimConfig,
        precision: Precision,
        *,
        schedule: LRSchedule = "constant",
        total_steps: int = 0,
        min_lr_ratio: float = 0.0,
        strategy: TrainingStrategy | None = None,
    ) -> None:
        """schedule, total_steps, min_lr_ratio: the decay after warm-up (`lr_at`); total_steps counts
        optimiser steps of the phase. strategy: what holds `model` (None: one whole copy, as ddp)."""
        if strategy is None:
            from trainer.strategy.ddp import DDPStrategy

            strategy = DDPStrategy(precision.device, 1)
        self.model = model
        self.strategy = strategy
        self.cfg = cfg
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.schedule = (schedule, total_steps, min_lr_ratio)
        self.precision = precision
        self.optimizer = build_adamw(model, base_lr, cfg, precision.device)
        self.params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.steps = 0  # attempted optimiser steps
        self.consecutive = torch.zeros((), dtype=torch.long, device=precision.device)

    @property
    def lr(self) -> float:
        """Learning rate of the next step."""
        return lr_at(self.steps, self.base_lr, self.warmup_steps, *self.schedule)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def step(self, loss: Tensor) -> StepResult:
        """Unscale (fp16), clip, and step unless `loss` or the gradient norm is not finite.

        `loss` is the step's (unscaled) loss, a 0-dim device tensor; no value is read on the host.
        """
        lr = self.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.precision.unscale_(self.optimizer)
        grad_norm = self.strategy.grad_norm([p.grad for p in self.params if p.grad is not None])
        if self.cfg.grad_clip is not None:
            torch.nn.utils.clip_grads_with_norm_(self.params, self.cfg.grad_clip, grad_norm, foreach=True)
        finite = torch.isfinite(grad_norm) & torch.isfinite(loss.detach())
        skipped = (~finite).float()
        self.optimizer.found_inf = skipped  # fused AdamW: 1 -> no change to weights, moments or step
        try:
            self.optimizer.step()
        finally:
            del self.optimizer.found_inf
        self.precision.update()
        self.steps += 1
        self.consecutive = torch.where(finite, torch.zeros_like(self.consecutive), self.consecutive + 1)
        return StepResult(grad_norm=grad_norm.detach(), skipped=skipped, consecutive_skips=self.consecutive)

    def check_skips(self, consecutive: int) -> None:
        """Raise when `consecutive` (read on the host with the step's metrics) reaches the limit."""
        if consecutive >= self.cfg.max_consecutive_skips:
            raise NonFiniteStepsError(
                f"{consecutive} optimiser steps in a row had a non-finite loss or gradient norm "
                f"(optim.max_consecutive_skips={self.cfg.max_consecutive_skips}); stopping"
            )

    def state_dict(self) -> dict:
        """The optimiser's state (whole: collective under fsdp), its step count and skip streak."""
        return {
            "optimizer": self.strategy.optimizer_state(self.model, self.optimizer),
            "steps": self.steps,
            "consecutive_skips": int(self.consecutive.item()),  # checkpoint time, not the hot path
        }

    def load_state_dict(self, state: dict) -> None:
        self.strategy.load_optimizer_state(self.model, self.optimizer, state["optimizer"])
        self.steps = int(state["steps"])
        self.consecutive.fill_(int(state["consecutive_skips"]))
