"""Section `gpu_memory`: the memory plan's estimate against the measured peak, one rank on one device.

Each case is a service config trained in process as one rank trains it (`Trainer.sft_step`, then
`Trainer.grpo_step` with the FEN reward scored inline; no Ray): the built-in `gpt2-4090` preset on
one worker, and a model of Qwen2-1.5B's shape (`examples/models/qwen2-1.5b-shape`, random weights
written by the section, the character tokenizer) in full fine-tuning with the step shapes of the
docs' 4 x 24 GiB example, on one worker. The measured peak is the allocator's
(`torch.cuda.max_memory_allocated`), over the second SFT step (the first builds AdamW's moments),
then over the GRPO steps, beside the tensors the plan counts for that phase; the allocator's
reserved peak is set beside the plan's phase with its term for the allocator's cached blocks, less
its process term (CUDA's context). The plan is given the data's longest prompt, as `--plan` is.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.results import add_table, new_section
from rewards import score_totals

TITLE = "The memory plan against the measured peak on one device"
QWEN_1P5B = Path(__file__).resolve().parents[1] / "examples" / "models" / "qwen2-1.5b-shape"
EAGER = ["model.compile=false", "sampling.compile=false", "sampling.cuda_graphs=false"]
# The docs' 1.5B example (docs/guides/gpus.md): hf-demo's shapes with rows sized for its vocabulary.
QWEN_SHAPES = ["sampling.prompts_per_microbatch=2", "sft.batch_size=16"]


@dataclass(frozen=True)
class Case:
    name: str
    preset: str
    overrides: tuple[str, ...]
    hf_shape: dict[str, Any] | None = None  # a transformers config to write with random weights


def cases(device: str) -> list[Case]:
    gpu = [f"scaling.use_gpu={'true' if device == 'cuda' else 'false'}", "scaling.num_workers=1"]
    qwen = json.loads((QWEN_1P5B / "config.json").read_text())
    return [
        Case("gpt2-4090, one worker (eager)", "gpt2-4090", (*gpu, *EAGER)),
        Case(
            "Qwen2-1.5B shape, full fine-tuning, one worker",
            "hf-demo",
            (*gpu, *EAGER, *QWEN_SHAPES),
            hf_shape=qwen,
        ),
    ]


def write_random_hf_model(shape: dict[str, Any], out: Path, device: str) -> Path:
    """A transformers model of `shape` with random weights (drawn on `device`, saved in bf16) and the
    character tokenizer, in `out`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainer.policy.hf_tiny import char_tokenizer

    tok = char_tokenizer()
    ids = {
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    fields = {k: v for k, v in shape.items() if k != "architectures"}
    config = AutoConfig.for_model(**{**fields, **ids})
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    del model
    return out


def _peak_bytes(device: str) -> float:
    return float(torch.cuda.max_memory_allocated()) if device == "cuda" else float("nan")


def _reserved_bytes(device: str) -> float:
    return float(torch.cuda.max_memory_reserved()) if device == "cuda" else float("nan")


def _reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def measure_case(case: Case, model_dir: Path | None, device: str, steps: int) -> dict[str, Any]:
    """One case: its plan and, for a fresh trainer, the peak over its SFT step and its GRPO steps."""
    from service.config import load_config, trainer_config
    from service.memory_plan import PROCESS_BYTES, estimate, run_inputs, tensors
    from service.model_shape import model_shape
    from service.scaling_strategy import strategy_config
    from service.tasks import build_task
    from trainer.data.chess_games import generate_pairs
    from trainer.engine import Trainer
    from trainer.grpo.reward_source import InlineRewards
    from trainer.policy import CharTokenizer, build_policy

    overrides = list(case.overrides) + ([f"model.path={model_dir}"] if model_dir else [])
    cfg = load_config(case.preset, overrides=overrides)
    task = build_task(cfg)
    n = cfg.grpo.prompts_per_step
    pairs = generate_pairs(
        2 * cfg.sft.batch_size + n * steps, cfg.data.seed, cfg.task.min_plies, cfg.task.max_plies
    )
    vocab, prompt_tokens = run_inputs(cfg, task, pairs)
    plan = estimate(cfg, model_shape(cfg, vocab), prompt_tokens=prompt_tokens)
    phases = {p.name: tensors(p) / 2**20 for p in plan.phases}  # against the allocated peak
    with_cache = {p.name: (p.total - PROCESS_BYTES) / 2**20 for p in plan.phases}  # against the reserved

    _reset_peak(device)
    tcfg = trainer_config(cfg)
    tokenizer = CharTokenizer(task.alphabet) if cfg.model.source == "builtin" else None
    trainer = Trainer(
        tcfg, device=device, policy=build_policy(tcfg, tokenizer), strategy=strategy_config(cfg)
    )
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    trainer.sft_step(pairs[: cfg.sft.batch_size])  # the first builds AdamW's moments after its backward
    _reset_peak(device)
    began = time.perf_counter()
    trainer.sft_step(pairs[cfg.sft.batch_size : 2 * cfg.sft.batch_size])
    sync()
    sft_s, sft_peak, sft_reserved = time.perf_counter() - began, _peak_bytes(device), _reserved_bytes(device)
    _reset_peak(device)
    rewards = InlineRewards(score_totals)
    times = []
    for i in range(steps):
        began = time.perf_counter()
        first = 2 * cfg.sft.batch_size + i * n
        trainer.grpo_step(pairs[first : first + n], rewards)
        sync()
        times.append(time.perf_counter() - began)
    grpo_peak, grpo_reserved = _peak_bytes(device), _reserved_bytes(device)
    params = sum(p.numel() for p in trainer.model.parameters())
    del trainer
    if device == "cuda":
        torch.cuda.empty_cache()
    grpo_plan = max(v for k, v in phases.items() if k != "sft")
    return {
        "params": params,
        "prompt_tokens": prompt_tokens,
        "sft_s": sft_s,
        "grpo_step_s": statistics.median(times[1:] or times),
        "sft_peak_mib": sft_peak / 2**20,
        "grpo_peak_mib": grpo_peak / 2**20,
        "sft_reserved_mib": sft_reserved / 2**20,
        "grpo_reserved_mib": grpo_reserved / 2**20,
        "plan_sft_mib": phases.get("sft"),
        "plan_grpo_mib": grpo_plan,
        "plan_grpo_reserved_mib": max(v for k, v in with_cache.items() if k != "sft"),
        "plan_phases_mib": phases,
        "plan_largest_term": plan.largest_term[0],
    }


def bench_gpu_memory(steps: int = 2, device: str = "cuda") -> dict[str, Any]:
    """The section: each case in turn, each with a fresh trainer (and model directory)."""
    section = new_section("gpu_memory", TITLE)
    if device == "cuda" and not torch.cuda.is_available():
        section["status"] = "skipped"
        section["error"] = "no CUDA device"
        return section
    results = {}
    for case in cases(device):
        with tempfile.TemporaryDirectory(prefix="bench-gpu-memory-") as tmp:
            model_dir = write_random_hf_model(case.hf_shape, Path(tmp), device) if case.hf_shape else None
            results[case.name] = measure_case(case, model_dir, device, steps)
    where = torch.cuda.get_device_name(0) if device == "cuda" else device
    add_table(
        section,
        f"one rank on one {where}: the second SFT step, then {steps} GRPO steps (GRPO step time: the median "
        "after the first)",
        [
            "case", "parameters (M)", "SFT step s", "GRPO step s", "SFT peak (MiB)", "plan: sft (MiB)",
            "GRPO peak (MiB)", "plan: GRPO (MiB)", "GRPO peak / plan", "GRPO peak reserved (MiB)",
            "plan: GRPO reserved (MiB)",
        ],
        [
            [
                name, r["params"] / 1e6, r["sft_s"], r["grpo_step_s"], r["sft_peak_mib"], r["plan_sft_mib"],
                r["grpo_peak_mib"], r["plan_grpo_mib"], r["grpo_peak_mib"] / r["plan_grpo_mib"],
                r["grpo_reserved_mib"], r["plan_grpo_reserved_mib"],
            ]
            for name, r in results.items()
        ],
    )  # fmt: skip
    section["data"] = {"steps": steps, "device": where, "results": results}
    section["notes"].append(
        "peak: torch.cuda.max_memory_allocated over the step(s); plan: the tensors of service.memory_plan's "
        "phase, with the data's longest prompt. Reserved: torch.cuda.max_memory_reserved (the allocator's "
        "cached blocks too), against the plan's phase with its allocator term, less its process term (CUDA's "
        "context, 1 GiB)"
    )
    return section
