"""GRPO without dropout: the sampler decodes in eval mode, so the update's forward must not drop
units either, or the importance ratio would start away from 1 (TRL's `disable_dropout`).

The module stays in training mode (gradient checkpointing and any other training-only path keep
working); only each `nn.Dropout`'s probability is 0 inside the context, and restored after.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


@contextmanager
def dropout_disabled(model: nn.Module) -> Iterator[None]:
    """Every `nn.Dropout` under `model` at p = 0 for the duration; the old values come back after."""
    saved = [(m, m.p) for m in model.modules() if isinstance(m, nn.modules.dropout._DropoutNd)]
    for m, _ in saved:
        m.p = 0.0
    try:
        yield
    finally:
        for m, p in saved:
            m.p = p
