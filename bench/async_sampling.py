"""Section `async` (`--sections async`): sampling in the trainer against sampler actors, at equal work.

Each variant is a whole short run of `python -m service.train` (the `smoke` preset's shape with more
GRPO steps, `run.backend=local`, the rewards on the pool, fp32, the preset's seed), in a process of
its own that starts its own Ray; the figures come from the run's `metrics.jsonl`. The variants:
- `sampling.placement=trainer`: the trainer decodes each step's batch itself;
- `sampling.placement=actors`, `grpo.max_staleness=0`: a sampler actor decodes the batch under the
  weights the step updates, so the trainer waits for it (the records are those of the trainer
  placement);
- the same at `grpo.max_staleness=1` (`grpo.policy_loss=tis`): the actor decodes batch s+1 under the
  weights of step s while the trainer updates on batch s.
Variants alternate within rounds (reversed order every other round). Per variant, medians over the
steps after `warmup` of every round: the step time and where it goes, read from the step records:
`sample_s` (the trainer's own decoding; with actors, publishing the version's weights and waiting
for the batch, scored), `ref_s` (the KL reference's pass), `reward_wait_s` (waiting for the pool's
rewards), `update_s`, and the rest of the step. The trainer waits on `reward_wait_s` under its own
sampling and on `sample_s + reward_wait_s` with actors: the idle share is that over the step time.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.results import add_table, new_section
from bench.timing import median
from bench.whole_run import grpo_records

TITLE = "13. Sampling apart from the trainer: step time and the trainer's wait"
HEADLINE: tuple[str, ...] = ()
COMMON = ("run.backend=local", "pool.placement=pool", "precision.dtype=fp32")
TRAINER = "trainer"
VARIANTS: dict[str, tuple[str, ...]] = {
    TRAINER: ("sampling.placement=trainer",),
    "actors, max_staleness 0": ("sampling.placement=actors", "grpo.max_staleness=0"),
    "actors, max_staleness 1 (tis)": (
        "sampling.placement=actors",
        "grpo.max_staleness=1",
        "grpo.policy_loss=tis",
    ),
}
PHASES = ("sample_s", "ref_s", "reward_wait_s", "update_s")


@dataclass(frozen=True)
class AsyncPlan:
    preset: str = "smoke"
    steps: int = 8  # GRPO steps of each run
    warmup: int = 1  # its first steps, left out of the medians
    rounds: int = 2
    timeout_s: float = 900.0


def overrides(plan: AsyncPlan, variant: str) -> list[str]:
    """The run's --set values: the common ones, the step count (one held-out evaluation and one
    checkpoint, at the end), then the variant's."""
    steps = (
        f"grpo.steps={plan.steps}",
        f"grpo.eval_every={plan.steps}",
        f"checkpoint.every_steps={plan.steps}",
    )
    return [*COMMON, *steps, *VARIANTS[variant]]


def run_variant(plan: AsyncPlan, variant: str, run_dir: Path) -> list[dict[str, Any]]:
    """One whole run of `variant`; its GRPO steps' records after the warm-up."""
    sets = overrides(plan, variant)
    return grpo_records(variant, plan.preset, run_dir, sets, plan.steps, plan.timeout_s)[plan.warmup :]


def trainer_wait_s(variant: str, record: dict[str, Any]) -> float:
    """Seconds of the step the trainer waits for its samples and rewards."""
    waited = record["reward_wait_s"]
    return waited if variant == TRAINER else waited + record["sample_s"]


def _row(variant: str, records: list[dict[str, Any]]) -> list[Any]:
    step = median([r["step_time_s"] for r in records])
    phases = [median([r[key] for r in records]) for key in PHASES]
    rest = median([r["step_time_s"] - sum(r[key] for key in PHASES) for r in records])
    wait = median([trainer_wait_s(variant, r) for r in records])
    share = median([trainer_wait_s(variant, r) / r["step_time_s"] for r in records])
    staleness = median([r.get("staleness", 0.0) for r in records])
    return [variant, step, *phases, rest, wait, share, median([r["completions_per_s"] for r in records]),
            staleness, len(records)]  # fmt: skip


def bench_async(plan: AsyncPlan) -> dict[str, Any]:
    if plan.steps <= plan.warmup:
        raise ValueError(f"steps ({plan.steps}) must exceed warmup ({plan.warmup})")
    section = new_section("async", TITLE, owns=HEADLINE)
    records: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        for round_index in range(plan.rounds):
            order = list(VARIANTS) if round_index % 2 == 0 else list(reversed(VARIANTS))
            for i, variant in enumerate(order):
                records[variant] += run_variant(plan, variant, Path(tmp) / f"r{round_index}-{i}")
    rows = [_row(name, records[name]) for name in VARIANTS]
    add_table(
        section,
        f"A GRPO step of the `{plan.preset}` preset's shape (medians over {plan.rounds} rounds x "
        f"{plan.steps - plan.warmup} steps after {plan.warmup} warm-up step, variants alternating; fp32, "
        "rewards on a pool of 1 worker)",
        ["sampling", "step s", "sampling s", "reference s", "reward wait s", "update s", "rest s",
         "trainer waits s", "idle share", "completions/s", "staleness", "steps"],
        rows,
    )  # fmt: skip
    base, own_sampling, overlapped = rows[0][1], rows[0][2], rows[0][3] + rows[0][5]
    section["notes"] += [
        "sampling s: the trainer's own decoding under `trainer`; with actors, publishing the version's "
        "weights and waiting for the scored batch. trainer waits s: reward wait under `trainer`, "
        "sampling + reward wait with actors; idle share: that over the step time",
        "step time over `trainer`: " + ", ".join(f"{row[0]} {row[1] / base:.2f}x" for row in rows[1:]),
        f"under `trainer` a step samples for {own_sampling:.3g} s and spends {overlapped:.3g} s on the "
        "reference pass and the update: a sampler a step ahead decodes during those, so the trainer's wait "
        "shrinks by at most that, and only on cores the two do not share",
    ]
    kept = ("step_time_s", *PHASES, "completions_per_s", "policy_version", "staleness", "is_weight_mean")
    section["data"] = {
        "plan": plan.__dict__,
        "steps": {name: [{k: r[k] for k in kept if k in r} for r in got] for name, got in records.items()},
    }
    return section
