"""Random-number state for exact resume, in a form `torch.load(weights_only=True)` accepts."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch


def capture_rng_state(device: torch.device) -> dict:
    """Global RNG states of torch (CPU and, on a CUDA device, CUDA), numpy and Python."""
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": name,
            "keys": keys.tolist(),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "python": random.getstate(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        (n["name"], np.asarray(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"], n["cached"])
    )
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def derived_seed(*parts: int) -> int:
    """A 63-bit seed from integers (run seed, rank, step): independent streams for each tuple."""
    digest = hashlib.sha256(":".join(str(int(p)) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
