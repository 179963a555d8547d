"""GPT-2's `gelu_new` with fewer temporaries: the same values bit for bit, a cheaper backward.

transformers' `NewGELUActivation` evaluates 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as
seven out-of-place tensor ops, each allocating an activation-sized tensor, and autograd keeps
most of them for a backward of as many ops again. Here the same ops run in the same order on one
temporary (so the forward's values are identical to the last bit: a run's greedy completions are
what its export gives under `transformers`), and the backward is the derivative in closed form
over the two saved tensors, making two new tensors where autograd's chain makes about ten. PyTorch's fused tanh GELU is the same function but not bit-identical,
so it is not used. Only modules of exactly that class are replaced; the config is untouched.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

_C = math.sqrt(2.0 / math.pi)
_A = 0.044715


def _tanh_part(x: Tensor) -> Tensor:
    """tanh(sqrt(2/pi) (x + 0.044715 x^3)), computed as NewGELUActivation computes it."""
    t = torch.pow(x, 3.0)
    t.mul_(_A)
    t.add_(x)
    t.mul_(_C)
    return t.tanh_()


class _GeluNew(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        u = _tanh_part(x).add_(1.0)  # 1 + t
        ctx.save_for_backward(x, u)
        return (0.5 * x).mul_(u)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        x, u = ctx.saved_tensors
        # d/dx 0.5 x (1 + t) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
        # with 1 - t^2 = u (2 - u): two new tensors, everything else in place
        slope = u.neg().add_(2.0).mul_(u).mul_(x)
        slope.mul_((x * x).mul_(3 * _A).add_(1.0).mul_(0.5 * _C))
        return slope.add_(u, alpha=0.5).mul_(grad)


def gelu_new(x: Tensor) -> Tensor:
    """NewGELUActivation's values, bit for bit; under autograd through `_GeluNew`."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _GeluNew.apply(x)
    return (0.5 * x).mul_(_tanh_part(x).add_(1.0))


class GeluNew(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return gelu_new(x)


def swap_modules(model: nn.Module, old: type[nn.Module], new: Callable[[], nn.Module]) -> int:
    """Put `new()` in place of every submodule of exactly the class `old`; how many were swapped."""
    swapped = 0
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if type(child) is old:
                setattr(parent, name, new())
                swapped += 1
    return swapped


def replace_gelu_new(model: nn.Module) -> int:
    """Put `GeluNew` in place of every `NewGELUActivation` in `model`; how many were replaced."""
    from transformers.activations import NewGELUActivation

    return swap_modules(model, NewGELUActivation, GeluNew)
