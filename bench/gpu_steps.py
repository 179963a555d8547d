"""`python -m bench.gpu_steps`: GRPO steps of the `gpt2-4090` preset on one CUDA device, in process.

The preset's trainer on one GPU (one rank), its FEN rewards scored inline: no Ray, so it runs where only
torch and the project's pure packages are installed. Each variant (bf16 eager, then + torch.compile and
CUDA graphs of the decode step) builds a fresh trainer, runs warm-up steps, then times steps; it prints
one row per variant: step seconds, completions/s, completion tokens/s and the step's phases.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

import torch

from bench.inline_scoring import scorer_rewards
from bench.results import add_table, new_section
from rewards import FenScorer, RewardConfig
from service.presets import PRESETS
from service.tasks import FenTaskConfig
from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, generate_pairs
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.policy.char_tokenizer import CharTokenizer

VARIANTS: dict[str, dict[str, Any]] = {
    "bf16 eager": {
        "model": {"compile": False},
        "sampling": {"compile": False, "cuda_graphs": False},
    },
    "bf16 + compile + CUDA graphs": {
        "model": {"compile": True},
        "sampling": {"compile": True, "cuda_graphs": True},
    },
}


def preset_trainer_config(preset: str, extra: dict[str, Any]) -> TrainerConfig:
    data = {k: dict(v) for k, v in PRESETS[preset].items() if k in TrainerConfig.model_fields}
    for section, values in extra.items():
        data.setdefault(section, {}).update(values)
    return TrainerConfig.model_validate(data)


def fen_rewards() -> InlineRewards:
    return InlineRewards(scorer_rewards(FenScorer(RewardConfig())))


def time_variant(
    preset: str, extra: dict[str, Any], warmup: int, steps: int, device: str = "cuda"
) -> dict[str, Any]:
    cfg = preset_trainer_config(preset, extra)
    torch.manual_seed(0)
    trainer = Trainer(cfg, CharTokenizer(CHESS_ALPHABET), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    task = PRESETS[preset].get("task", {})
    games = FenTaskConfig.model_validate({k: v for k, v in task.items() if k in FenTaskConfig.model_fields})
    pairs = generate_pairs(
        cfg.grpo.prompts_per_step * (warmup + steps),
        cfg.data.seed,
        games.min_plies,
        games.max_plies,
        games.natural,
    )
    rewards = fen_rewards()
    n = cfg.grpo.prompts_per_step
    rows = []
    for i in range(warmup + steps):
        sync()
        metrics = trainer.grpo_step(pairs[i * n : (i + 1) * n], rewards)
        sync()
        print(f"  step {i + 1}/{warmup + steps}: {metrics['step_time_s']:.2f} s", file=sys.stderr, flush=True)
        if i >= warmup:
            rows.append(metrics)
    step_s = statistics.median(r["step_time_s"] for r in rows)
    completions = rows[0]["completions"]
    tokens = statistics.median(r["tokens"] for r in rows)
    phases = {
        k: statistics.median(r[k] for r in rows)
        for k in rows[0]
        if k.endswith("_s") and k not in ("step_time_s", "completions_per_s")
    }
    return {
        "step_s": step_s,
        "completions": completions,
        "completions_per_s": completions / step_s,
        "completion_tokens": tokens,
        "tokens_per_s": tokens / step_s,
        "phases_s": phases,
        "peak_mib": torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan"),
    }


TITLE = "GRPO steps of a preset on one CUDA device (in process)"


def bench_gpu_steps(
    preset: str = "gpt2-4090",
    warmup: int = 2,
    steps: int = 4,
    device: str = "cuda",
    variants: tuple[str, ...] = tuple(VARIANTS),
) -> dict[str, Any]:
    """The section: the variants on the preset, one after the other, each a fresh trainer."""
    section = new_section("gpu_steps", TITLE)
    results: dict[str, Any] = {}
    for name in variants:
        extra = VARIANTS[name]
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        results[name] = time_variant(preset, extra, warmup, steps, device)
    phases = sorted({k for r in results.values() for k in r["phases_s"]})
    add_table(
        section,
        f"`{preset}`, {steps} timed steps after {warmup} warm-up, on "
        + (torch.cuda.get_device_name(0) if device == "cuda" else device),
        ["variant", "step s", "completions/s", "tokens/s", "peak MiB", *phases],
        [
            [name, r["step_s"], r["completions_per_s"], r["tokens_per_s"], r["peak_mib"]]
            + [r["phases_s"].get(k) for k in phases]
            for name, r in results.items()
        ],
    )
    section["data"] = {"preset": preset, "warmup": warmup, "steps": steps, "results": results}
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_steps", description=__doc__)
    parser.add_argument("--preset", default="gpt2-4090")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: these rows need one", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "preset": args.preset}
    for name, extra in VARIANTS.items():
        torch.cuda.reset_peak_memory_stats()
        results[name] = r = time_variant(args.preset, extra, args.warmup, args.steps)
        phases = ", ".join(f"{k} {v:.3f}" for k, v in r["phases_s"].items())
        print(
            f"{name}: step {r['step_s']:.3f} s, {r['completions_per_s']:.1f} completions/s, "
            f"{r['tokens_per_s']:.0f} tokens/s, peak {r['peak_mib']:.0f} MiB; {phases}",
            flush=True,
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
