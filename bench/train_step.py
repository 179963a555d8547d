"""Section 3: one training step (forward, cross-entropy, backward, AdamW) by numeric mode.

Each mode runs in a fresh process (`isolated.run_isolated`) so that its peak memory is its own:
on CPU the peak resident set above the RSS before the first step, on CUDA the allocator's peak.
The batch is random tokens under plain causal attention (the model's fast path), the same for
every mode. On CPU: fp32 against bf16 autocast; on CUDA also TF32, fused AdamW and
torch.compile, and the model FLOPs utilisation (MFU) of the 124M (`gpt2`) model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from bench.isolated import PeakMemory, run_isolated
from bench.results import add_table, new_section, set_headline
from bench.timing import median
from trainer.attention_backend import configure_attention
from trainer.compile import maybe_compile
from trainer.config import PrecisionConfig
from trainer.data.chess_games import CHESS_ALPHABET
from trainer.host_memory import configure_host_memory
from trainer.model_config import BuiltinModelConfig
from trainer.policy.attention import resolve_attention
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.policy.linear_kernel import resolve_linear_kernel
from trainer.precision import Precision, configure_tf32, resolve_dtype

TOKENIZER = CharTokenizer(CHESS_ALPHABET)
TITLE = "3. Training step by numeric mode"
HEADLINE = ("bf16_vs_fp32_speedup", "mfu")

# Dense bf16 tensor-core peaks (TFLOP/s) by device name; more specific names first.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H100", 989.0),  # SXM
    ("H200", 989.0),
    ("RTX 4090", 165.2),  # with fp32 accumulate
    ("A100", 312.0),
)

# name -> (dtype, tf32, fused AdamW, torch.compile)
CPU_MODES: dict[str, tuple[str, bool, bool, bool]] = {
    "fp32": ("fp32", False, True, False),
    "bf16 autocast": ("bf16", False, True, False),
}
CUDA_MODES: dict[str, tuple[str, bool, bool, bool]] = {
    "fp32": ("fp32", False, False, False),
    "fp32 + TF32": ("fp32", True, False, False),
    "bf16": ("bf16", True, False, False),
    "bf16 + fused AdamW": ("bf16", True, True, False),
    "bf16 + fused + compile": ("bf16", True, True, True),
}


@dataclass(frozen=True)
class TrainStepPlan:
    cpu_sizes: tuple[str, ...] = ("tiny", "small")
    cuda_sizes: tuple[str, ...] = ("gpt2",)
    cpu_batch: tuple[int, int] = (64, 96)  # [B, T]: a GRPO step's 64 completions of prompt + 64 tokens
    cuda_batch: tuple[int, int] = (64, 256)
    threads: int = 2
    steps: int = 10
    warmup: int = 3
    rounds: int = 1  # each mode runs this many times, interleaved with the others
    seed: int = 0
    emulated_bf16: bool = True  # measure bf16 on a CPU that only emulates it (smallest size only: it is slow)
    cuda_modes: dict[str, tuple[str, bool, bool, bool]] = field(default_factory=lambda: dict(CUDA_MODES))


def peak_bf16_flops(device_name: str) -> float | None:
    """The card's dense bf16 peak in FLOP/s, or None for a card not in the table."""
    for key, tflops in PEAK_BF16_TFLOPS:
        if key.lower() in device_name.lower():
            return tflops * 1e12
    return None


def run_trial(
    size: str,
    batch: int,
    seq_len: int,
    dtype: str,
    tf32: bool,
    fused: bool,
    compile_: bool,
    device: str,
    threads: int,
    steps: int,
    warmup: int,
    seed: int,
) -> dict[str, Any]:
    """Median step time, tokens/s and peak memory of one mode (meant for a fresh process)."""
    dev = torch.device(device)
    if dev.type == "cpu":
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    precision_cfg = PrecisionConfig(dtype=dtype, tf32=tf32)
    configure_tf32(precision_cfg, dev)
    configure_attention(dev)  # the kernels and host memory the trainer runs with
    configure_host_memory(dev)
    precision = Precision(precision_cfg, dev)
    model = GPT(BuiltinModelConfig(size=size, block_size=max(256, seq_len)), TOKENIZER.vocab_size).to(dev)
    # as a run in this mode attends
    model.set_attention(resolve_attention("auto", dev, precision.dtype, model.config.block_size)[0])
    model.set_linear_kernel(resolve_linear_kernel("auto", dev)[0])
    forward = maybe_compile(model, device=dev, enabled=compile_, what="the training step benchmark")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused, foreach=None if fused else True)
    ids = torch.randint(0, TOKENIZER.vocab_size, (batch, seq_len + 1), device=dev)  # [B, T+1]
    x, y = ids[:, :-1], ids[:, 1:]
    memory = PeakMemory(dev)
    times = []
    for i in range(warmup + steps):
        began = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with precision.autocast():
            logits = forward(x)  # [B, T, V]
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if i >= warmup:
            times.append(time.perf_counter() - began)
    peak = peak_bf16_flops(torch.cuda.get_device_name(dev)) if dev.type == "cuda" else None
    out = {
        "times_s": times,
        "tokens_per_step": batch * seq_len,
        "flops_per_token": model.estimate_flops_per_token(seq_len),
        "peak_flops": peak,
        "params": model.num_params(non_embedding=False),
        "loss": float(loss),
    }
    return {**summarise(out), **memory.result()}


def summarise(trial: dict[str, Any]) -> dict[str, Any]:
    """Median step time, tokens/s, achieved TFLOP/s and MFU from a trial's step times."""
    step_s = median(trial["times_s"])
    tokens_per_s = trial["tokens_per_step"] / step_s
    flops_per_s = trial["flops_per_token"] * tokens_per_s
    peak = trial["peak_flops"]
    return {
        **trial,
        "step_s": step_s,
        "tokens_per_s": tokens_per_s,
        "achieved_tflops": flops_per_s / 1e12,
        "mfu": flops_per_s / peak if peak else None,
    }


def merge_rounds(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs of one mode in several rounds as one: all their steps, the largest peak memory."""
    merged = {**trials[0], "times_s": [t for r in trials for t in r["times_s"]]}
    merged["peak_mb"] = max(r["peak_mb"] for r in trials)
    return summarise(merged)


def _measured(plan: TrainStepPlan, device: str, size: str, sizes: tuple[str, ...], dtype: str) -> bool:
    """Every mode on every size, except emulated bf16 (a CPU without native bf16): smallest size
    only, and none with plan.emulated_bf16 off."""
    emulated = device == "cpu" and dtype == "bf16" and resolve_dtype("auto", "cpu")[0] != "bf16"
    return not emulated or (plan.emulated_bf16 and size == sizes[0])


def _modes(plan: TrainStepPlan, device: str) -> tuple[tuple[str, ...], tuple[int, int], dict]:
    if device == "cuda":
        return plan.cuda_sizes, plan.cuda_batch, plan.cuda_modes
    return plan.cpu_sizes, plan.cpu_batch, CPU_MODES


def bench_train_step(plan: TrainStepPlan) -> dict[str, Any]:
    section = new_section("train_step", TITLE, owns=HEADLINE)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sizes, (batch, seq_len), modes = _modes(plan, device)
    results: dict[str, dict[str, Any]] = {}
    rows = []
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {
        (size, name): []
        for size in sizes
        for name in modes
        if _measured(plan, device, size, sizes, modes[name][0])
    }
    for _ in range(plan.rounds):  # every mode once per round: background load spreads over all of them
        for size, name in runs:
            dtype, tf32, fused, compile_ = modes[name]
            kwargs = {"size": size, "batch": batch, "seq_len": seq_len, "dtype": dtype, "tf32": tf32}
            kwargs.update(fused=fused, compile_=compile_, device=device, threads=plan.threads)
            kwargs.update(steps=plan.steps, warmup=plan.warmup, seed=plan.seed)
            runs[(size, name)].append(run_isolated("bench.train_step:run_trial", kwargs))
    for (size, name), trials in runs.items():
        r = results.setdefault(size, {})[name] = merge_rounds(trials)
        base = results[size][next(iter(modes))]
        rows.append(
            [
                size,
                name,
                r["step_s"] * 1e3,
                r["tokens_per_s"],
                base["step_s"] / r["step_s"],
                r["peak_mb"],
                r["achieved_tflops"],
                r["mfu"],
            ]
        )
    method = next(iter(next(iter(results.values())).values()))["method"]
    add_table(
        section,
        f"Step of {batch} x {seq_len} tokens on {device}"
        + (f", {plan.threads} threads" if device == "cpu" else ""),
        ["model", "mode", "step ms", "tokens/s", "speed-up vs fp32", "peak MiB", "TFLOP/s", "MFU"],
        rows,
    )
    section["notes"].append(f"Peak memory: {method}.")
    if any((size, name) not in runs for size in sizes for name in modes):
        which = f"only on `{sizes[0]}`" if plan.emulated_bf16 else "not measured (quick plan)"
        section["notes"].append(
            f"bf16 autocast {which} ({resolve_dtype('auto', 'cpu')[1]}): bf16 matmuls are "
            "emulated here, and the larger model's bf16 rows alone would take many minutes."
        )
    section["data"] = {"device": device, "batch": batch, "seq_len": seq_len, "results": results}
    _headline(section, device, results)
    return section


def _headline(section: dict[str, Any], device: str, results: dict[str, dict[str, Any]]) -> None:
    if device != "cuda":
        for key in ("bf16_vs_fp32_speedup", "mfu"):
            set_headline(section, key, None, "no CUDA device")
        section["notes"].append(
            "On CPU, bf16 autocast adds casts around every matmul, and only some CPUs multiply bf16 "
            f"faster than fp32 ({resolve_dtype('auto', 'cpu')[1]}); bf16 rows attend as a run in bf16 "
            "does here (model.attn_implementation auto: explicit matmuls). Measured and shown as it is."
        )
        return
    gpt2 = results.get("gpt2")
    if not gpt2 or "fp32" not in gpt2 or "bf16" not in gpt2:
        for key in ("bf16_vs_fp32_speedup", "mfu"):
            set_headline(section, key, None, "the 124M model's fp32 and bf16 modes were not in this plan")
        return
    set_headline(section, "bf16_vs_fp32_speedup", gpt2["fp32"]["step_s"] / gpt2["bf16"]["step_s"])
    best = gpt2.get("bf16 + fused + compile") or gpt2["bf16"]
    if best["mfu"] is None:
        set_headline(section, "mfu", None, f"no peak bf16 rate known for {torch.cuda.get_device_name()}")
    else:
        set_headline(section, "mfu", best["mfu"])
    section["notes"].append(
        "bf16_vs_fp32_speedup: fp32 without TF32 over bf16 autocast (both with foreach AdamW, eager); "
        "mfu: the 124M model in bf16 with fused AdamW and torch.compile."
    )
