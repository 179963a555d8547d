"""Section `autoscale` (`--sections autoscale`): fixed pools of 1, 2 and 4 workers against the
autoscaled pool, over a run whose reward cost changes.

Each variant is a whole run of `python -m service.train` (the `smoke` preset's shape, more GRPO
steps, `run.backend=local`, rewards on the pool, fp32), in a process of its own that starts its own
Ray. The reward is `bench.paced_reward:paced`, whose cost per item follows a schedule over the
GRPO steps (`AutoscalePlan.costs_ms`: cheap, then dear, then cheap again), counted by the items it
has scored, so every variant meets the same cost at the same step. Variants alternate within rounds (reversed order every other
round). Per variant: the GRPO steps' total time, their median step time and wait share
(`reward_wait_s / step_time_s`), and the pool's size over the steps; a figure beside bench.md plots
the pool's size and the step time over the steps.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.results import add_table, new_section
from bench.timing import median
from bench.whole_run import grpo_records

TITLE = "14. A pool that sizes itself: fixed pools against pool.autoscale as the reward's cost changes"
HEADLINE: tuple[str, ...] = ()
FIGURE = "autoscale.png"
COMMON = (
    "run.backend=local",
    "pool.placement=pool",
    "precision.dtype=fp32",
    "reward.user=[{fn: 'bench.paced_reward:paced'}]",
)
AUTOSCALED = "autoscaled 1..4"
VARIANTS: dict[str, tuple[str, ...]] = {
    "fixed 1": ("pool.num_workers=1",),
    "fixed 2": ("pool.num_workers=2",),
    "fixed 4": ("pool.num_workers=4",),
    AUTOSCALED: (
        "pool.num_workers=1",
        "pool.autoscale={min_workers: 1, max_workers: 4, target_wait_share: 0.2, cooldown_steps: 2}",
    ),
}


@dataclass(frozen=True)
class AutoscalePlan:
    preset: str = "smoke"
    steps: int = 36  # GRPO steps of each run
    # (the share of the GRPO steps it lasts to, milliseconds per item): the reward's cost over the run
    costs_ms: tuple[tuple[float, float], ...] = ((0.25, 0.5), (0.75, 10.0), (1.0, 0.5))
    rounds: int = 1
    timeout_s: float = 900.0


def overrides(plan: AutoscalePlan, variant: str) -> list[str]:
    steps = (
        f"grpo.steps={plan.steps}",
        f"grpo.eval_every={plan.steps}",
        f"checkpoint.every_steps={plan.steps}",
    )
    return [*COMMON, *steps, *VARIANTS[variant]]


def schedule(plan: AutoscalePlan) -> dict[str, Any]:
    """The paced reward's schedule (`bench.paced_reward`): the preset's items per GRPO step, and
    the cost in seconds up to each step."""
    from service.config import load_config

    cfg = load_config(preset=plan.preset, overrides=())
    costs = [[until * plan.steps, ms / 1000.0] for until, ms in plan.costs_ms]
    return {"items_per_step": cfg.grpo.prompts_per_step * cfg.sampling.group_size, "costs": costs}


def run_variant(plan: AutoscalePlan, variant: str, run_dir: Path) -> list[dict[str, Any]]:
    """One whole run of `variant`, its reward's cost paced by the items it scores; its GRPO
    steps' records."""
    cost_file = run_dir.parent / f"{run_dir.name}.cost.json"
    cost_file.write_text(json.dumps(schedule(plan)))
    env = {"GRPO_BENCH_COST_FILE": str(cost_file)}  # the run's Ray workers inherit it
    return grpo_records(
        variant, plan.preset, run_dir, overrides(plan, variant), plan.steps, plan.timeout_s, env
    )


def _row(variant: str, runs: list[list[dict[str, Any]]]) -> list[Any]:
    records = [r for run in runs for r in run]
    total = median([sum(r["step_time_s"] for r in run) for run in runs])
    sizes = [int(r["pool_workers"]) for r in records]
    resizes = median([sum(1 for r in run if "pool_resized_to" in r) for run in runs])
    return [
        variant,
        total,
        median([r["step_time_s"] for r in records]),
        median([r["reward_wait_s"] / r["step_time_s"] for r in records]),
        sum(r["reward_wait_s"] for r in records) / sum(r["step_time_s"] for r in records),
        f"{min(sizes)}-{max(sizes)}",
        sum(sizes) / len(sizes),
        resizes,
    ]


def bench_autoscale(plan: AutoscalePlan) -> dict[str, Any]:
    section = new_section("autoscale", TITLE, owns=HEADLINE)
    runs: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench-autoscale-") as tmp:
        for round_index in range(plan.rounds):
            order = list(VARIANTS) if round_index % 2 == 0 else list(reversed(VARIANTS))
            for i, variant in enumerate(order):
                runs[variant].append(run_variant(plan, variant, Path(tmp) / f"r{round_index}-{i}"))
    rows = [_row(name, runs[name]) for name in VARIANTS]
    schedule = ", ".join(f"{ms:g} ms an item to {until:.0%} of the steps" for until, ms in plan.costs_ms)
    add_table(
        section,
        f"{plan.steps} GRPO steps of the `{plan.preset}` preset's shape ({plan.rounds} round(s), variants "
        f"alternating; fp32, rewards on the pool); the reward sleeps {schedule}",
        ["pool", "GRPO s", "step s (median)", "wait share (median)", "wait share (all steps)",
         "workers", "workers (mean)", "resizes"],
        rows,
    )  # fmt: skip
    fixed = {row[0]: row[1] for row in rows if row[0] != AUTOSCALED}
    scaled = next(row for row in rows if row[0] == AUTOSCALED)
    section["notes"] += [
        "GRPO s over the autoscaled pool's: "
        + ", ".join(f"{name} {total / scaled[1]:.2f}x" for name, total in fixed.items()),
        f"the autoscaled pool held {scaled[6]:.2f} workers on average against the fixed pools' 1, 2 and 4",
        "wait share: the share of a step spent waiting for rewards (`reward_wait_s / step_time_s`)",
    ]
    kept = ("step", "step_time_s", "reward_wait_s", "pool_workers", "pool_resized_to", "pool_resize_why")
    section["data"] = {
        "plan": {**plan.__dict__, "costs_ms": [list(c) for c in plan.costs_ms]},
        "steps": {
            name: [[{k: r[k] for k in kept if k in r} for r in run] for run in got]
            for name, got in runs.items()
        },
    }
    section["figures"] = [
        {
            "file": FIGURE,
            "title": "Pool size and step time over a run whose reward cost changes",
            "kind": "autoscale",
        }
    ]
    return section
