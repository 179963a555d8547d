"""Numerics of the forward and backward passes: autocast, the fp16 GradScaler, TF32.

- auto: bf16 where the device computes it faster, else fp32 (`resolve_dtype`): on CUDA a GPU
  with bf16 support; on a CPU with AMX-BF16's matrix tiles, a model at least `AMX_MIN_WIDTH`
  wide (narrower models spend more on autocast's casts than the tiles save); on a CPU with
  AVX512-BF16 dot products but no tiles, where bf16 matmuls run at least `MIN_BF16_SPEEDUP` times
  fp32's (`bf16_matmul_speedup`: more than 2.5x means dot-product units wider than fp32's FMAs,
  which AVX512-BF16 alone does not promise). That figure is timed once per machine and kept
  (`trainer.machine_figures`), so every run of a config on one machine computes alike.
- fp32: no autocast.
- bf16: autocast to bfloat16 (CUDA and CPU); weights, gradients and optimiser state stay fp32;
  no GradScaler (bfloat16 has fp32's exponent range, so gradients do not underflow).
- fp16: autocast to float16 with a GradScaler, which exists on this path only.

What `auto` became, and why, is recorded in the run's runtime.json and kept in its checkpoints: a
resumed run computes in the precision of the run it continues (`actors.run.kept_runtime`).
"""

from __future__ import annotations

import contextlib
import time

import torch
from torch import Tensor

from trainer.config import PrecisionConfig
from trainer.machine_figures import cpu_flags, kept_figure

_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


FAST_BF16_CPU_FLAGS = ("amx_bf16",)  # matrix tiles
AMX_MIN_WIDTH = 256  # hidden width from which bf16 on AMX beats fp32 (module docstring)
MIN_BF16_SPEEDUP = 2.5  # bf16 over fp32 matmul speed from which `auto` takes bf16 on AVX512-BF16
PROBE_WIDTH = 256  # the probe's inner dimension
PROBE_ROUNDS = 9  # timed products of each dtype
CPU_BF16_DECODE_MIN_WIDTH = 256  # `sampling.dtype: auto` decodes narrower models in fp32 on a CPU


def bf16_matmul_speedup() -> float:
    """How many times faster this CPU multiplies bf16 than fp32 matrices (`time_bf16_speedup`),
    timed once per machine and kept (`trainer.machine_figures`)."""
    return bf16_speedup_kept()[0]


def bf16_speedup_kept() -> tuple[float, str]:
    """(bf16_matmul_speedup, where the figure comes from)."""
    return kept_figure("bf16_matmul_speedup", time_bf16_speedup)


def time_bf16_speedup() -> float:
    """One `[1024, 256] x [256, 1024]` product of each dtype on one thread, alternating, after a
    warm-up: the ratio of the fastest fp32 time to the fastest bf16 time (the fastest of several
    is the one least disturbed by other work on the machine). A property of the core's
    dot-product units: on two threads, or at a model's own narrow width, the ratio moves with
    threading overheads, so it is timed on one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times: dict[torch.dtype, list[float]] = {torch.float32: [], torch.bfloat16: []}
        gen = torch.Generator().manual_seed(0)
        a, b = torch.randn(1024, PROBE_WIDTH, generator=gen), torch.randn(PROBE_WIDTH, 1024, generator=gen)
        pairs = {dt: (a.to(dt), b.to(dt)) for dt in times}
        for rep in range(PROBE_ROUNDS + 1):
            for dt, (x, y) in pairs.items():
                began = time.perf_counter()
                torch.mm(x, y)
                if rep:  # the first round warms the kernels up
                    times[dt].append(time.perf_counter() - began)
    finally:
        torch.set_num_threads(threads)
    return min(times[torch.float32]) / min(times[torch.bfloat16])


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
        speedup, source = bf16_speedup_kept()
        measured = f"bf16 matmuls measured {speedup:.1f}x fp32's on this CPU (avx512_bf16, no AMX; {source})"
        if speedup >= MIN_BF16_SPEEDUP:
            return "bf16", f"auto: {measured}"
        return "fp32", f"auto: {measured}, under the {MIN_BF16_SPEEDUP:g}x bf16 needs"
    return "fp32", "auto: the CPU has no native bf16 (no amx_bf16 / avx512_bf16)"


def resolve_sampling_dtype(
    setting: str, run_dtype: str, device: torch.device | str, width: int | None = None
) -> tuple[str, str]:
    """(the dtype decoding computes in, why): `sampling.dtype: auto` is the run's dtype, except fp32
    on a CPU for a model narrower than `CPU_BF16_DECODE_MIN_WIDTH`. A decode step multiplies a
    handful of rows by each weight, where bf16 gains little and autocast's casts of every
    activation and cache write cost more. The update's log-probs are its own forward's, so the
    importance ratio does not mix the two."""
    if setting != "auto":
        return setting, "set in the config"
    narrow = width is not None and width < CPU_BF16_DECODE_MIN_WIDTH
    if torch.device(device).type == "cpu" and run_dtype in ("bf16", "fp16") and narrow:
        return "fp32", (
            f"auto: the run computes in {run_dtype}, but on a CPU a model {width} wide "
            f"(< {CPU_BF16_DECODE_MIN_WIDTH}) decodes faster in fp32"
        )
    return run_dtype, "auto: the run's precision"


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

    def __init__(
        self,
        cfg: PrecisionConfig,
        device: torch.device | str,
        width: int | None = None,
        reason: str | None = None,
    ) -> None:
        """width: the model's hidden size, which `auto` weighs on a CPU (`resolve_dtype`). reason:
        why cfg.dtype is what it is, where the caller resolved it (decoding's `sampling.dtype`)."""
        self.cfg = cfg
        self.device = torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"precision: device type must be 'cpu' or 'cuda', got {self.device.type!r}")
        self.dtype, self.reason = resolve_dtype(cfg.dtype, self.device, width)
        self.reason = reason or self.reason
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


def decoding_precision(cfg, run: Precision, device: torch.device, width: int | None) -> Precision:
    """The precision decoding computes in (`sampling.dtype`, `resolve_sampling_dtype`); `run` itself
    when it is the run's. cfg: a TrainerConfig."""
    dtype, reason = resolve_sampling_dtype(cfg.sampling.dtype, run.dtype, device, width)
    if dtype == run.dtype:
        return run
    return Precision(cfg.precision.model_copy(update={"dtype": dtype}), device, width, reason=reason)


def agreed_precision(run: Precision, cfg, width: int | None) -> Precision:
    """The precision every rank computes in: rank 0's resolution of `auto`, since the bf16 probe
    is timed on each rank and two ranks near its threshold could disagree. Collective where
    torch.distributed runs (every rank calls it once, as it builds its trainer). cfg: a TrainerConfig."""
    from trainer.distributed import gather_json, rank_and_world

    if cfg.precision.dtype != "auto" or rank_and_world()[1] == 1:
        return run
    dtype, reason = gather_json([run.dtype, run.reason], run.device)[0]
    if dtype == run.dtype:
        return run
    return Precision(
        cfg.precision.model_copy(update={"dtype": dtype}), run.device, width, reason=f"rank 0's {reason}"
    )
