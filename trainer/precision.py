"""Numerics of the forward and backward passes: autocast, the fp16 GradScaler, TF32.

- auto: bf16 where the device computes it faster, else fp32 (`resolve_dtype`): on CUDA a GPU
  with bf16 support; on CPU only AMX-BF16's matrix tiles, and only for a model at least
  `AMX_MIN_WIDTH` wide. Without AMX, bf16 matmuls are emulated (AVX2) or run on AVX512-BF16 dot
  products, which measured no faster than fp32 on a GRPO step of the demo model on a 2-core AMD
  EPYC with AVX512-BF16 (10.7k vs 10.9k tokens/s, the decode step 1.5x slower), so those CPUs
  compute in fp32. With AMX, autocast's casts of activations cost O(rows x width) against the
  matmuls' O(rows x width^2): on a 2-core Xeon with AMX a GRPO step of a 128-wide model was 0.93x
  fp32's speed in bf16, of a 256-wide one 1.34x, 384 1.53x, 512 1.93x.
- fp32: no autocast.
- bf16: autocast to bfloat16 (CUDA and CPU); weights, gradients and optimiser state stay fp32;
  no GradScaler (bfloat16 has fp32's exponent range, so gradients do not underflow).
- fp16: autocast to float16 with a GradScaler, which exists on this path only.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch
from torch import Tensor

from trainer.config import PrecisionConfig

_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


FAST_BF16_CPU_FLAGS = ("amx_bf16",)  # matrix tiles; avx512_bf16 alone measured no faster than fp32
AMX_MIN_WIDTH = 256  # hidden width from which bf16 on AMX beats fp32 (module docstring)


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (empty where /proc/cpuinfo is not readable)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def resolve_dtype(dtype: str, device: torch.device | str, width: int | None = None) -> tuple[str, str]:
    """(the dtype a run computes in, why): `auto` made concrete for `device` and a model `width`
    wide (its hidden size; None: not known, as if wide enough); other dtypes unchanged."""
    device = torch.device(device)
    if dtype != "auto":
        return dtype, "set in the config"
    if device.type == "cuda":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return "bf16", "auto: the GPU supports bf16"
        return "fp32", "auto: the GPU has no bf16 support"
    flags = cpu_flags()
    if fast := sorted(set(FAST_BF16_CPU_FLAGS) & flags):
        tiles = f"the CPU has bf16 matrix tiles ({', '.join(fast)})"
        if width is not None and width < AMX_MIN_WIDTH:
            return (
                "fp32",
                f"auto: {tiles}, but the model is {width} wide (< {AMX_MIN_WIDTH}: bf16 is slower there)",
            )
        return "bf16", f"auto: {tiles}"
    if "avx512_bf16" in flags:
        return "fp32", "auto: the CPU has avx512_bf16 but no amx_bf16 (bf16 measured no faster there)"
    return "fp32", "auto: the CPU has no native bf16 (no amx_bf16 / avx512_bf16)"


def configure_tf32(cfg: PrecisionConfig, device: torch.device) -> None:
    """Allow (or forbid) TF32 matmuls and convolutions on CUDA; nothing to do elsewhere.

    This is process-wide state of torch, so the trainer calls it once when it is built.
    """
    if device.type != "cuda":
        return
    torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
    torch.backends.cudnn.allow_tf32 = cfg.tf32


class Precision:
    """The autocast context, loss scaling and unscaling for one `PrecisionConfig` on one device."""

    def __init__(self, cfg: PrecisionConfig, device: torch.device | str, width: int | None = None) -> None:
        """width: the model's hidden size, which `auto` weighs on a CPU with AMX (`resolve_dtype`)."""
        self.cfg = cfg
        self.device = torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"precision: device type must be 'cpu' or 'cuda', got {self.device.type!r}")
        self.dtype, self.reason = resolve_dtype(cfg.dtype, self.device, width)
        if self.dtype == "bf16" and self.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ValueError(
                "precision.dtype=bf16 needs a GPU with bfloat16 support (compute capability >= 8.0)"
            )
        self.autocast_dtype = _AUTOCAST_DTYPES.get(self.dtype)
        self.scaler = torch.amp.GradScaler(self.device.type) if self.dtype == "fp16" else None

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context for forward passes (training, sampling, reference); a no-op for fp32."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def backward(self, loss: Tensor) -> None:
        """`loss.backward()`, scaled by the GradScaler under fp16."""
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients back to their true scale before clipping (fp16 only)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def update(self) -> None:
        """After the optimiser step: let the GradScaler grow or back off its scale (fp16 only)."""
        if self.scaler is not None:
            self.scaler.update()

    def state_dict(self) -> dict:
        return {} if self.scaler is None else {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        # A checkpoint written under bf16/fp32 has no scaler state: the fp16 scaler then starts fresh.
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
