"""The `async` section: each variant's run command, what the trainer waits on, a failed run's one
line, and the section at toy sizes through whole `python -m service.train` runs, as `--sections
async` runs it (step times are not asserted: they depend on the machine and its load)."""

from __future__ import annotations

import dataclasses

import pytest

from bench.async_sampling import TRAINER, VARIANTS, AsyncPlan, bench_async, overrides, trainer_wait_s
from bench.plan import OPTIONAL_SECTIONS, quick_plan
from bench.runner import run_bench


def test_every_variant_runs_the_same_work_and_sets_its_placement():
    plan = AsyncPlan(steps=5)
    runs = {variant: overrides(plan, variant) for variant in VARIANTS}
    common = ["run.backend=local", "pool.placement=pool", "precision.dtype=fp32", "grpo.steps=5"]
    for sets in runs.values():
        assert sets[: len(common)] == common
    assert "sampling.placement=trainer" in runs[TRAINER]
    staleness = {v: [s for s in sets if s.startswith("grpo.max_staleness=")] for v, sets in runs.items()}
    assert sorted(staleness.values()) == [[], ["grpo.max_staleness=0"], ["grpo.max_staleness=1"]]
    [stale] = [v for v, s in staleness.items() if s == ["grpo.max_staleness=1"]]
    assert "grpo.policy_loss=tis" in runs[stale]


def test_the_trainer_waits_on_rewards_alone_when_it_samples_itself():
    record = {"sample_s": 0.5, "reward_wait_s": 0.25}
    assert trainer_wait_s(TRAINER, record) == 0.25
    assert trainer_wait_s("actors, max_staleness 0", record) == 0.75


def test_a_plan_without_measured_steps_is_refused():
    with pytest.raises(ValueError, match="must exceed warmup"):
        bench_async(AsyncPlan(steps=1, warmup=1))


@pytest.mark.slow
def test_a_failed_run_is_one_line_naming_its_variant():
    with pytest.raises(RuntimeError, match="the 'trainer' run failed") as failed:
        bench_async(AsyncPlan(preset="no-such-preset", steps=2, rounds=1))
    assert "\n" not in str(failed.value)


@pytest.mark.slow
@pytest.mark.e2e
def test_the_async_section_runs_each_variant_at_toy_sizes():
    assert "async" in OPTIONAL_SECTIONS
    plan = dataclasses.replace(quick_plan(), sections=("async",), async_sampling=AsyncPlan(steps=2, rounds=1))
    result = run_bench(plan, "python -m bench --sections async")
    [section] = result["sections"]
    assert section["status"] == "ok", section["error"]
    [table] = section["tables"]
    assert [row[0] for row in table["rows"]] == list(VARIANTS)
    columns = table["columns"]
    for row in table["rows"]:
        cells = dict(zip(columns, row, strict=True))
        assert cells["step s"] > 0 and 0 <= cells["idle share"] <= 1 and cells["steps"] == 1
    staleness = [dict(zip(columns, row, strict=True))["staleness"] for row in table["rows"]]
    assert staleness == [0.0, 0.0, 1.0]
    assert {len(steps) for steps in section["data"]["steps"].values()} == {1}
