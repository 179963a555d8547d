"""Section `cost-curve` (only with `--sections cost-curve`): how a GRPO step's cost grows with its work.

One factor grows while the rest stay at the base: the reference configuration (`bench.grpo`:
tiny GPT, fp32, 8 prompts x K=8, 64 new tokens), a fresh policy, every completion decoded to
`max_new_tokens` with EOS ignored (so the work is exactly what the factor says), the bundled FEN
reward scored inline. The factors: K, prompts per step, max new tokens, the model (built-in
sizes), and reward workers (a pool of 1..4, with a 1 ms CPU reward and with a 20 ms waiting one).
Each point is a trial in a fresh process: `warmup` untimed steps, then `steps` timed (medians).

For each factor: seconds per step, completion tokens per second, and the exponent of cost in work
(least squares of log seconds on log tokens per step), with the local exponent between each pair
of neighbouring points: where it leaves 1 is where the curve bends. Headline
`cost_exponent_tokens`: the exponent over the K and prompts sweeps together (the batch grows, the
sequences stay). A plot of every factor goes beside bench.md as cost_curve.png.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ray

from bench.cost_rewards import COSTS
from bench.grpo import reference_config, with_updates
from bench.isolated import run_isolated
from bench.results import add_table, new_section, set_headline
from rewards import RewardConfig
from rewards.config import UserRewardSpec
from trainer.model_config import MODEL_SIZES

TITLE = "10. The cost curve: a GRPO step as one factor grows"
HEADLINE = ("cost_exponent_tokens",)
FIGURE = "cost_curve.png"
_TRIAL = "bench.grpo_trial:run_trial"
PROMPT_ROOM = 64  # block_size = max_new_tokens + this (the generated games' prompts are shorter)


@dataclass(frozen=True)
class CostCurvePlan:
    group_sizes: tuple[int, ...] = (4, 8, 16, 32)
    prompts: tuple[int, ...] = (4, 8, 16, 32, 64)
    max_new_tokens: tuple[int, ...] = (32, 64, 128, 256)
    sizes: tuple[str, ...] = ("tiny", "small")
    workers: tuple[int, ...] = (1, 2, 4)
    worker_rewards: tuple[str, ...] = ("cpu 1 ms", "io 20 ms (async)")
    steps: int = 3
    warmup: int = 1
    threads: int = 2


def _points(plan: CostCurvePlan) -> list[tuple[str, Any, dict[str, Any], dict[str, Any]]]:
    """(factor, value, config updates, trial options) of every point."""
    points = [("K (completions per prompt)", k, {"sampling.group_size": k}, {}) for k in plan.group_sizes]
    points += [("prompts per step", n, {"grpo.prompts_per_step": n}, {}) for n in plan.prompts]
    points += [
        ("max new tokens", t, {"sampling.max_new_tokens": t, "model.block_size": t + PROMPT_ROOM}, {})
        for t in plan.max_new_tokens
    ]
    # a named size fills the dimensions only where none are given: give them
    points += [
        ("model", size, {"model.size": size, **{f"model.{k}": v for k, v in MODEL_SIZES[size].items()}}, {})
        for size in plan.sizes
    ]
    for cost in plan.worker_rewards:
        spec, waits = COSTS[cost]
        reward = RewardConfig(user=[UserRewardSpec(fn=spec)] if spec else []).model_dump()
        for w in plan.workers:
            pool = {"num_workers": w, "cpus_per_worker": 0.5, "min_chunk_size": 16}
            pool["concurrency_per_worker"] = 64 if waits else 1
            points.append(
                (f"reward workers ({cost})", w, {}, {"rewards": "pool", "reward": reward, "pool_cfg": pool})
            )
    return points


def exponent(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log y on log x (None with fewer than two distinct x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    var = sum((x - mx) ** 2 for x in lx)
    if len(set(xs)) < 2 or var == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly, strict=True)) / var


def _trial(plan: CostCurvePlan, base: dict[str, Any], updates: dict, options: dict, gcs: str) -> dict:
    kwargs = {
        "trainer_cfg": with_updates(base, updates) if updates else base,
        "rewards": "inline",
        "steps": plan.steps,
        "warmup": plan.warmup,
        "threads": plan.threads,
        "gcs_address": gcs,
        "fixed_length": True,
        **options,
    }
    return run_isolated(_TRIAL, kwargs)


def bench_cost_curve(plan: CostCurvePlan) -> dict[str, Any]:
    """Run the section (needs `ray.init` done by the caller, for the reward-worker points)."""
    if not ray.is_initialized():
        raise RuntimeError("the cost-curve section needs Ray: call ray.init(...) first")
    section = new_section("cost-curve", TITLE, owns=HEADLINE)
    base = reference_config(0, 64)
    gcs = ray.get_runtime_context().gcs_address
    results: dict[str, list[dict[str, Any]]] = {}
    for factor, value, updates, options in _points(plan):
        r = _trial(plan, base, updates, options, gcs)
        tokens = r["completions"] * r["completion_tokens"]
        point = {"value": value, "step_s": r["step_s"], "tokens": tokens, "tokens_per_s": r["tokens_per_s"]}
        point.update(peak_mb=r["peak_mb"], completion_tokens=r["completion_tokens"])
        results.setdefault(factor, []).append(point)
    rows = []
    for factor, points in results.items():
        fitted = exponent([p["tokens"] for p in points], [p["step_s"] for p in points])
        for i, p in enumerate(points):
            local = (
                exponent([points[i - 1]["tokens"], p["tokens"]], [points[i - 1]["step_s"], p["step_s"]])
                if i
                else None
            )
            rows.append([factor, p["value"], p["tokens"], p["step_s"], p["tokens_per_s"], p["peak_mb"],
                         "-" if local is None else local, "-" if fitted is None or i else fitted])  # fmt: skip
    add_table(
        section,
        f"Seconds per step as one factor grows (fixed-length completions, medians of {plan.steps} steps)",
        [
            "factor",
            "value",
            "completion tokens per step",
            "step s",
            "tokens/s",
            "peak MB",
            "local exponent (from the row above)",
            "exponent over the factor",
        ],  # fmt: skip
        rows,
    )
    batch = [p for f in ("K (completions per prompt)", "prompts per step") for p in results.get(f, [])]
    headline = exponent([p["tokens"] for p in batch], [p["step_s"] for p in batch]) if batch else None
    if headline is None:
        set_headline(section, "cost_exponent_tokens", None, "no K or prompts sweep in this plan")
    else:
        set_headline(section, "cost_exponent_tokens", headline)
    section["data"] = {"points": results}
    section["figures"] = [
        {"file": FIGURE, "title": "Seconds per GRPO step as one factor grows", "kind": "cost_curve"}
    ]
    return section
