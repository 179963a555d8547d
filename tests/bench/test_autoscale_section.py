"""The `autoscale` section: the cost schedule, each variant's run command, the paced reward, and
the section at toy sizes through whole `python -m service.train` runs, as `--sections autoscale`
runs it (times are not asserted: they depend on the machine and its load)."""

from __future__ import annotations

import dataclasses

import pytest

from bench.autoscale import AUTOSCALED, VARIANTS, AutoscalePlan, overrides, schedule
from bench.paced_reward import cost_s, paced
from bench.plan import OPTIONAL_SECTIONS, quick_plan
from bench.runner import run_bench


def test_the_cost_follows_the_schedule_over_the_grpo_steps_counted_in_items():
    plan = AutoscalePlan(steps=8, costs_ms=((0.25, 1.0), (0.75, 10.0), (1.0, 0.5)))
    sched = schedule(plan)
    assert sched["items_per_step"] == 16  # the smoke preset: 4 prompts x 4 completions
    per_step = [cost_s(sched, 16 * (s - 1)) * 1000 for s in range(1, 10)]
    assert per_step == [1.0, 1.0, 10.0, 10.0, 10.0, 10.0, 0.5, 0.5, 0.5]
    assert cost_s(sched, 31) == cost_s(sched, 16)  # every item of a step costs the same


def test_every_variant_runs_the_same_work_and_only_one_autoscales():
    plan = AutoscalePlan(steps=5)
    runs = {variant: overrides(plan, variant) for variant in VARIANTS}
    common = [s for s in runs[AUTOSCALED] if not s.startswith("pool.")]
    for sets in runs.values():
        assert [s for s in sets if not s.startswith("pool.")] == common
        assert "pool.placement=pool" in sets
    scaled = [v for v, sets in runs.items() if any(s.startswith("pool.autoscale=") for s in sets)]
    assert scaled == [AUTOSCALED]
    assert sorted(s for v in VARIANTS for s in runs[v] if s.startswith("pool.num_workers=")) == [
        "pool.num_workers=1", "pool.num_workers=1", "pool.num_workers=2", "pool.num_workers=4",
    ]  # fmt: skip


def test_the_paced_reward_counts_its_items_across_calls_and_sleeps_their_cost(tmp_path, monkeypatch):
    import json
    import time

    from bench import paced_reward

    spec = tmp_path / "cost.json"
    spec.write_text(json.dumps({"items_per_step": 2, "costs": [[1, 0.0], [9, 0.05]]}))
    monkeypatch.setenv("GRPO_BENCH_COST_FILE", str(spec))
    monkeypatch.setattr(paced_reward, "_schedule", {})
    began = time.monotonic()
    assert paced("a", "a") == 1.0 and paced("a", "b") == 0.0  # step 1: free
    assert time.monotonic() - began < 0.05
    paced("a", "a")  # step 2: 50 ms
    assert time.monotonic() - began >= 0.05
    assert (tmp_path / "cost.json.count").read_text() == "3"


@pytest.mark.slow
@pytest.mark.e2e
def test_the_autoscale_section_runs_each_variant_at_toy_sizes():
    assert "autoscale" in OPTIONAL_SECTIONS
    toy = AutoscalePlan(steps=6, costs_ms=((0.5, 20.0), (1.0, 0.5)), rounds=1)
    plan = dataclasses.replace(quick_plan(), sections=("autoscale",), autoscale=toy)
    result = run_bench(plan, "python -m bench --sections autoscale")
    [section] = result["sections"]
    assert section["status"] == "ok", section["error"]
    [table] = section["tables"]
    assert [row[0] for row in table["rows"]] == list(VARIANTS)
    for row in table["rows"]:
        cells = dict(zip(table["columns"], row, strict=True))
        assert cells["GRPO s"] > 0 and 0 <= cells["wait share (all steps)"] <= 1
    fixed = {row[0]: row[5] for row in table["rows"] if row[0] != AUTOSCALED}
    assert fixed == {"fixed 1": "1-1", "fixed 2": "2-2", "fixed 4": "4-4"}
    assert [len(run) for run in section["data"]["steps"][AUTOSCALED]] == [6]
