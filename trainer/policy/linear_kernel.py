"""fp32 linear layers on a CPU through oneDNN instead of MKL, and `auto`'s choice between them.

torch multiplies a CPU fp32 `F.linear` with MKL's sgemm. MKL picks its kernels by CPU vendor: on
an AMD CPU it runs its AVX2 code even where the CPU has AVX-512. oneDNN, also inside torch, picks
them by instruction set, so on such a CPU its fp32 GEMM is the faster one: about twice MKL's at a
GRPO update's shapes ([4144, 128] x [128, 512] and its backward's products) and 1.4x at a decoding
step's 64 rows, on a 2-core AMD EPYC (Zen 5, AVX-512). Both compute in fp32 and agree within float
rounding (summation order). bf16 matmuls go through oneDNN already.

- `onednn`: the model's linear layers compute in fp32 through `torch.ops.mkldnn._linear_pointwise`
  (forward, and the backward's two products), and without autograd the MLP's GELU is fused into
  its first product. A layer falls back to `F.linear` where this does not apply: not a CPU
  tensor, not fp32, under autocast, or while `torch.compile` traces (inductor picks its own GEMM).
  A decoding step's small products go through oneDNN too, checked once per step (`step_linear`).
- `torch`: torch's own `F.linear`.
- `auto`: `onednn` on an AMD CPU with AVX-512 where torch has oneDNN; `torch` elsewhere (on an Intel
  CPU MKL takes its AVX-512 kernels itself, so torch's own choice stands).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.machine_figures import cpu_flags, cpu_info_field

LINEAR_KERNELS = ("auto", "onednn", "torch")
# Fewer rows go through torch in `KernelLinear`: at a few dozen rows its per-call checks eat half of
# what oneDNN saves (a decoding step, which checks once, takes `step_linear`).
ONEDNN_MIN_ROWS = 256


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def cpu_vendor() -> str:
    """The CPU's vendor id as Linux lists it ('' where /proc/cpuinfo is not readable)."""
    return cpu_info_field("vendor_id")


def resolve_linear_kernel(setting: str, device: torch.device | str) -> tuple[str, str]:
    """(the kernel a run's fp32 linear layers use, why) for `model.linear_kernel` on `device`."""
    if setting not in LINEAR_KERNELS:
        raise ValueError(f"model.linear_kernel must be one of {LINEAR_KERNELS}, got {setting!r}")
    if setting == "onednn" and not onednn_available():
        raise ValueError("model.linear_kernel=onednn: this torch build has no oneDNN (mkldnn)")
    if setting != "auto":
        return setting, "set in the config"
    if torch.device(device).type != "cpu":
        return "torch", "auto: not a CPU"
    if not onednn_available():
        return "torch", "auto: this torch build has no oneDNN"
    if cpu_vendor() == "AuthenticAMD" and "avx512f" in cpu_flags():
        return "onednn", "auto: an AMD CPU with AVX-512, where MKL's fp32 GEMM runs its AVX2 kernels"
    return "torch", "auto: MKL's fp32 GEMM on this CPU"


def _pointwise(x: Tensor, weight: Tensor, bias: Tensor | None, gelu: bool = False) -> Tensor:
    """x `[M, K]` @ weight `[N, K]`^T (+ bias, then exact GELU when `gelu`) by oneDNN."""
    if gelu:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "gelu", [], "none")
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    """y = x W^T + b, forward and backward by oneDNN. x is 2-D."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _pointwise(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        x, weight = ctx.saved_tensors
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _pointwise(grad, weight.t(), None)  # grad @ W
        if ctx.needs_input_grad[1]:
            # oneDNN lays its transposed input out afresh: the narrower of grad and x goes there
            # (the wider one's copy, such as the MLP projection's [rows, 4C] input, costs most of the product)
            if weight.shape[0] <= weight.shape[1]:
                dw = _pointwise(grad.t(), x.t(), None)  # grad^T x
            else:
                dw = _pointwise(x.t(), grad.t(), None).t().contiguous()  # (x^T grad)^T
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = grad.sum(0)
        return dx, dw, db


def _torch_linear(x: Tensor, weight: Tensor, bias: Tensor | None, gelu: bool = False) -> Tensor:
    y = F.linear(x, weight, bias)
    return F.gelu(y) if gelu else y


def _applies(x: Tensor, weight: Tensor) -> bool:
    """Whether oneDNN can compute this fp32 product here, whatever the row count."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
    )


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, gelu: bool = False) -> Tensor:
    """`F.linear(x, weight, bias)` (then `F.gelu`, exact, when `gelu`) by oneDNN where it applies
    (module docstring), else by torch."""
    if x.numel() < ONEDNN_MIN_ROWS * x.shape[-1] or not _applies(x, weight):
        return _torch_linear(x, weight, bias, gelu)
    flat = x.reshape(-1, x.shape[-1])
    grads = torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    if grads:
        y = _OneDNNLinear.apply(flat, weight, bias)
        y = F.gelu(y) if gelu else y  # the backward needs the product before the GELU
    else:
        y = _pointwise(flat, weight, bias, gelu)
    return y.view(*x.shape[:-1], weight.shape[0])


def _onednn_step(module: nn.Linear, x: Tensor, gelu: bool = False) -> Tensor:
    # `_pointwise`'s call, inlined: a decoding step makes four per layer, each a Python frame fewer
    if gelu:
        return torch.ops.mkldnn._linear_pointwise(x, module.weight, module.bias, "gelu", [], "none")
    return torch.ops.mkldnn._linear_pointwise(x, module.weight, module.bias, "none", [], "")


def _torch_step(module: nn.Linear, x: Tensor, gelu: bool = False) -> Tensor:
    return _torch_linear(x, module.weight, module.bias, gelu)


def step_linear(module: KernelLinear, x: Tensor) -> Callable[..., Tensor]:
    """How a decoding step's linear layers multiply, `(layer, x, gelu=False) -> y`, chosen once per
    step from its first layer `module` and input `x` `[rows, C]`: oneDNN's product called directly
    (GELU fused) where the model's kernel is onednn and oneDNN applies, whatever the row count;
    else torch's `F.linear`.

    A decoding step's products are small (tens of microseconds each), so checking at every call
    whether oneDNN applies, as `KernelLinear` does, costs about half of what oneDNN saves there; a
    step makes those checks once."""
    if module.kernel == "onednn" and not torch.is_grad_enabled() and _applies(x, module.weight):
        return _onednn_step
    return _torch_step


class KernelLinear(nn.Linear):
    """`nn.Linear` (the same parameters and state dict) whose fp32 CPU product is computed by the
    kernel in `kernel` ('torch' or 'onednn'; set through the model, `GPT.set_linear_kernel`)."""

    kernel = "torch"

    def _onednn(self, x: Tensor) -> bool:
        # a decoding step (few rows) leaves at once, as plain nn.Linear would; a compiled graph
        # before reading a shape (no guard on the row count)
        return (
            self.kernel == "onednn"
            and not torch.compiler.is_compiling()
            and x.numel() >= ONEDNN_MIN_ROWS * self.in_features
        )

    def forward(self, x: Tensor) -> Tensor:
        if self._onednn(x):
            return onednn_linear(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)

    def gelu(self, x: Tensor) -> Tensor:
        """`F.gelu(self(x))`, fused into the product where oneDNN computes it without autograd."""
        if self._onednn(x):
            return onednn_linear(x, self.weight, self.bias, gelu=True)
        return _torch_linear(x, self.weight, self.bias, gelu=True)
