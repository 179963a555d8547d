"""torch's intra-op thread count for one block of work."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with `torch.set_num_threads(n)` (None: leave it), restoring it afterwards."""
    before = torch.get_num_threads()
    if n is not None:
        if n < 1:
            raise ValueError(f"threads must be >= 1, got {n}")
        if n != before:
            torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
