"""Which kernels a run computes with: the policy's attention implementation and its fp32 linear
kernel (`trainer.policy.linear_kernel`), and on CUDA not cuDNN's attention.

A GRPO step attends over shapes that keep changing: the KV cache grows by one column per decoded
token, and every micro-batch has its own prompt and completion lengths. torch's cuDNN attention
backend builds an execution plan on the host for each new shape, so its cost never amortises here:
on an NVIDIA H200 (torch 2.11, the `gpt2-4090` preset's GRPO step, bf16) about 3.6 ms of CPU per
attention call, most of the sampling phase. With that backend off, torch takes flash or
memory-efficient attention, which need no plan, and the same step samples about 9x faster. This is
process-wide state of torch, set once when the trainer is built.
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.policy.attention import resolve_attention
from trainer.policy.linear_kernel import resolve_linear_kernel


def configure_attention(device: torch.device) -> None:
    """On CUDA, leave cuDNN's attention out of torch's scaled_dot_product_attention choices."""
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def configure_policy_attention(
    policy: Any, model_cfg: Any, device: torch.device, dtype: str
) -> dict[str, str]:
    """Give the policy the attention `model.attn_implementation` resolves to on `device` computing
    in `dtype` (`trainer.policy.attention`); {"attention", "attention_reason"} for the record."""
    positions = policy.max_positions if model_cfg.source == "builtin" else None
    implementation, reason = resolve_attention(model_cfg.attn_implementation, device, dtype, positions)
    policy.set_attention(implementation)
    return {"attention": implementation, "attention_reason": reason}


def configure_policy_linear(policy: Any, model_cfg: Any, device: torch.device) -> dict[str, str]:
    """Give the built-in GPT the fp32 linear kernel `model.linear_kernel` resolves to on `device`
    (`trainer.policy.linear_kernel`); {"linear_kernel", "linear_kernel_reason"} for the record,
    empty for a policy without the setting."""
    if model_cfg.source != "builtin":
        return {}
    kernel, reason = resolve_linear_kernel(model_cfg.linear_kernel, device)
    policy.module.set_linear_kernel(kernel)
    return {"linear_kernel": kernel, "linear_kernel_reason": reason}
