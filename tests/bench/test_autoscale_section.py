"""The `autoscale` section: the cost schedule, each variant's run command, the paced reward, and
the section at toy sizes through whole `python -m service.train` runs, as `--sections autoscale`
runs it (times are not asserted: they depend on the machine and its load)."""

from __future__ import annotations

import dataclasses

import pytest

from bench.autoscale import AUTOSCALED, VARIANTS, AutoscalePlan, overrides
from bench.paced_reward import paced
from bench.plan import OPTIONAL_SECTIONS, quick_plan
from bench.runner import run_bench


def test_the_cost_follows_the_schedule_over_the_grpo_steps():
    plan = AutoscalePlan(steps=8, costs_ms=((0.25, 1.0), (0.75, 10.0), (1.0, 0.5)))
    assert [plan.cost_s(s) * 1000 for s in range(1, 9)] == [1.0, 1.0, 10.0, 10.0, 10.0, 10.0, 0.5, 0.5]


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


def test_the_paced_reward_sleeps_what_its_file_says(tmp_path, monkeypatch):
    import time

    from bench import paced_reward

    cost = tmp_path / "cost"
    cost.write_text("0.05")
    monkeypatch.setenv("GRPO_BENCH_COST_FILE", str(cost))
    monkeypatch.setitem(paced_reward._cost, "read_at", float("-inf"))
    began = time.monotonic()
    assert paced("a", "a") == 1.0 and paced("a", "b") == 0.0
    assert time.monotonic() - began >= 0.1  # two items at 50 ms


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
