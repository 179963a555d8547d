"""Step metrics kept on the device and moved to the host once per step.

Reading a CUDA scalar (`.item()`, `.cpu()`, `float(t)`, printing) blocks the host until the GPU
catches up. Inside a step we only add tensors here; `to_host` stacks them and does a single
`.tolist()` at the end of the step, where the step's one sync happens anyway.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch
from torch import Tensor


class DeviceMetrics:
    """Sums (and means) of scalar metrics; tensors stay where they are until `to_host`."""

    def __init__(self) -> None:
        self._tensors: dict[str, Tensor] = {}
        self._floats: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, name: str, value: Tensor | float, *, mean: bool = False) -> None:
        """Accumulate `value` (a 0-dim tensor or a number) under `name`.

        With `mean=True` the host value is the mean of every value added under `name`; otherwise
        the sum. A name is either a tensor metric or a number metric, never both.
        """
        if mean:
            self._counts[name] = self._counts.get(name, 0) + 1
        elif name in self._counts:
            raise ValueError(f"metric {name!r} was added as a mean; add it with mean=True every time")
        if isinstance(value, Tensor):
            if value.numel() != 1:
                raise ValueError(f"metric {name!r} must be a scalar, got shape {tuple(value.shape)}")
            if name in self._floats:
                raise ValueError(f"metric {name!r} mixes tensors and numbers")
            value = value.detach().reshape(()).float()
            prev = self._tensors.get(name)
            self._tensors[name] = value if prev is None else prev + value
        else:
            if name in self._tensors:
                raise ValueError(f"metric {name!r} mixes tensors and numbers")
            self._floats[name] = self._floats.get(name, 0.0) + float(value)

    def set(self, name: str, value: Tensor | float) -> None:
        """Replace `name` with `value` (a last-value metric)."""
        self._tensors.pop(name, None)
        self._floats.pop(name, None)
        self._counts.pop(name, None)
        self.add(name, value)

    def to_host(self) -> dict[str, float]:
        """Every metric as a Python float, with ONE device-to-host transfer for all tensor metrics."""
        out = dict(self._floats)
        if self._tensors:
            names = list(self._tensors)
            devices = {t.device for t in self._tensors.values()}
            target = next(iter(devices))
            stacked = torch.stack([self._tensors[n].to(target) for n in names])
            out.update(zip(names, stacked.tolist(), strict=True))
        for name, count in self._counts.items():
            out[name] = out[name] / count
        return out


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); nothing to wait for on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PhaseTimer:
    """Wall-clock time of a step's phases. Each phase ends with a device sync (CUDA only), so the
    time charged to a phase is the work it queued, not whatever the next phase happens to wait for.
    These syncs sit at phase boundaries, never inside a phase's loop."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str, sync: bool = True):
        start = time.perf_counter()
        try:
            yield
        finally:
            if sync:
                synchronize(self.device)
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
