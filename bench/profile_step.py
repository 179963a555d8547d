"""`python -m bench.profile_step`: torch.profiler's per-op table of the reference GRPO step.

Runs the reference configuration (`bench.grpo.reference_config`) with inline scoring in
this process: an optional SFT warm start, `warmup` untimed steps, then `steps` profiled steps.
Prints (or writes with --out) a Markdown file: the step's phases as the profiler's
`record_function` labels see them, then the top ops by self CPU time.

    python -m bench.profile_step --sft-steps 100 --out docs/grpo_profile.md
    python -m bench.profile_step --set precision.dtype=bf16 --set model.compile=true
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from bench.grpo import reference_config, with_updates
from bench.grpo_trial import CHESS_TOKENIZER, GRPO_DATA_SEED, sft_warm_start
from bench.inline_scoring import scorer_rewards
from bench.machine import describe, load_average, machine_info
from rewards import FenScorer, RewardConfig
from trainer.config import TrainerConfig
from trainer.data.chess_games import generate_pairs
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards

PHASES = ("grpo.sample", "grpo.reference", "grpo.update")


def _labelled(fn: Callable, label: str) -> Callable:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with record_function(label):
            return fn(*args, **kwargs)

    return wrapped


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def profile_steps(
    cfg: dict[str, Any], steps: int, warmup: int, threads: int, init_weights: str | None
) -> tuple[Any, float]:
    """(profiler, median step seconds) of `steps` GRPO steps after `warmup` untimed ones."""
    torch.set_num_threads(threads)
    trainer = Trainer(TrainerConfig.model_validate(cfg), CHESS_TOKENIZER)
    if init_weights:
        trainer.model.load_state_dict(torch.load(init_weights))
    trainer.rollouts.sample = _labelled(trainer.rollouts.sample, PHASES[0])
    trainer.reference_logprobs = _labelled(trainer.reference_logprobs, PHASES[1])
    trainer.grpo_update = _labelled(trainer.grpo_update, PHASES[2])
    rewards = InlineRewards(scorer_rewards(FenScorer(RewardConfig())))
    n = trainer.cfg.grpo.prompts_per_step
    pairs = generate_pairs((warmup + steps) * n, seed=GRPO_DATA_SEED, min_plies=1, max_plies=4)
    for i in range(warmup):
        trainer.grpo_step(pairs[i * n : (i + 1) * n], rewards)
    times = []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        for i in range(warmup, warmup + steps):
            began = time.perf_counter()
            trainer.grpo_step(pairs[i * n : (i + 1) * n], rewards)
            times.append(time.perf_counter() - began)
    return prof, sorted(times)[len(times) // 2]


def render(prof: Any, step_s: float, steps: int, cfg: dict[str, Any], top: int) -> str:
    averages = prof.key_averages()
    phases = {e.key: e for e in averages if e.key in PHASES}
    lines = [
        "# Profile of the reference GRPO step",
        "",
        f"Machine: {describe(machine_info())}; load average {load_average()}.",
        f"Settings: precision {cfg['precision']}, model.compile {cfg['model']['compile']}, "
        f"sampling.compile {cfg['sampling']['compile']}; median step {step_s * 1e3:.0f} ms "
        "(under the profiler, which adds its own overhead per op).",
        "",
        "| phase | ms per step | share |",
        "|---|---|---|",
    ]
    total = step_s * 1e3
    for name in PHASES:
        if name in phases:
            ms = phases[name].cpu_time_total / 1e3 / steps
            lines.append(f"| {name} | {ms:.1f} | {ms / total:.0%} |")
    lines += [
        "",
        f"Top {top} ops by self CPU time, per step:",
        "",
        "| op | calls per step | self ms per step | share of step |",
        "|---|---|---|---|",
    ]
    ops = sorted((e for e in averages if e.key not in PHASES), key=lambda e: -e.self_cpu_time_total)
    for e in ops[:top]:
        ms = e.self_cpu_time_total / 1e3 / steps
        lines.append(f"| `{e.key}` | {e.count / steps:.0f} | {ms:.1f} | {ms / total:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_step", description=__doc__)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sft-steps", type=int, default=0, help="SFT warm start first (0: fresh policy)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--set", action="append", default=[], help="section.key=value on the reference")
    parser.add_argument("--out", help="write the Markdown here instead of printing it")
    args = parser.parse_args(argv)
    updates = {k: _parse_value(v) for k, v in (s.split("=", 1) for s in args.set)}
    cfg = with_updates(reference_config(max(1, args.sft_steps)), updates)
    with tempfile.TemporaryDirectory(prefix="profile-sft-") as tmp:
        weights = None
        if args.sft_steps:
            weights = f"{tmp}/sft.pt"
            sft_warm_start(cfg, weights, args.threads)
        prof, step_s = profile_steps(cfg, args.steps, args.warmup, args.threads, weights)
    text = render(prof, step_s, args.steps, cfg, args.top)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
