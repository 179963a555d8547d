"""The weights a sampler holds, named and hashed: what the trainer publishes each step and what a
sampler apart from it reports having generated with.

Only the trainable weights travel (the whole policy, or the adapter alone under LoRA): the rest is
built the same way on both sides and never changes. The digest covers each tensor's name, dtype,
shape and bytes, so a sampler still holding an older version, or a part of one, gives another.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch
from torch import Tensor, nn


def trainable_names(module: nn.Module) -> list[str]:
    """Names of `module`'s trainable parameters (a tied weight once, under its first name)."""
    return [name for name, p in module.named_parameters() if p.requires_grad]


def trainable_weights(module: nn.Module, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The trainable entries of `state` (a state dict of `module`), as CPU copies: what a step
    publishes, detached from the live weights that train on."""
    missing = [name for name in trainable_names(module) if name not in state]
    if missing:
        raise ValueError(f"the policy's state has no weight named {missing[0]!r} ({len(missing)} missing)")
    return {name: state[name].detach().to("cpu", copy=True) for name in trainable_names(module)}


def module_weights(module: nn.Module) -> dict[str, Tensor]:
    """`module`'s trainable parameters as they are now (what a sampler generates with)."""
    return {name: p.detach() for name, p in module.named_parameters() if p.requires_grad}


def weights_digest(weights: Mapping[str, Tensor]) -> str:
    """A hex digest of named tensors, independent of their device and of the mapping's order."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(weights):
        t = weights[name].detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def load_weights(module: nn.Module, weights: Mapping[str, Tensor]) -> None:
    """Copy `weights` (trainable names of `module`) into its parameters, in place."""
    params = dict(module.named_parameters())
    unknown = [name for name in weights if name not in params]
    if unknown:
        raise ValueError(f"published weights name {unknown[0]!r}, which the sampler's policy does not have")
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)
