"""The `fsdp` section at toy sizes, run as `--sections fsdp` runs it: both strategies at world 2 on
gloo, each rank's row, and fsdp holding half of ddp's training state on each rank (figures of time
and memory are not asserted: they depend on the machine and its load)."""

from __future__ import annotations

import dataclasses

import pytest

from bench.fsdp import FSDPPlan
from bench.plan import OPTIONAL_SECTIONS, quick_plan
from bench.runner import run_bench

TOY = FSDPPlan(n_layer=1, n_embd=64, n_head=2, prompts_per_rank=1, group_size=2, max_new_tokens=8, steps=1,
               warmup=0)  # fmt: skip


@pytest.mark.slow
def test_the_fsdp_section_measures_both_strategies_on_each_rank():
    assert "fsdp" in OPTIONAL_SECTIONS
    plan = dataclasses.replace(quick_plan(), sections=("fsdp",), fsdp=TOY)
    result = run_bench(plan, "python -m bench --sections fsdp")
    [section] = result["sections"]
    assert section["status"] == "ok", section["error"]
    [table] = section["tables"]
    rows = {(row[0], row[1]): row for row in table["rows"]}
    assert set(rows) == {("ddp", 0), ("ddp", 1), ("fsdp", 0), ("fsdp", 1)}
    for strategy, rank in rows:
        step_ms, state_mb, peak_mb, estimate_mb, process_mb, whole_mb = rows[(strategy, rank)][2:]
        assert step_ms > 0 and state_mb > 0 and peak_mb >= 0 and estimate_mb > 0
        assert process_mb > peak_mb and whole_mb > estimate_mb  # the whole process, and its term
    for rank in (0, 1):  # each rank holds half of each sharded tensor (an even split at world 2)
        assert rows[("fsdp", rank)][3] == pytest.approx(rows[("ddp", rank)][3] / 2, rel=0.05)
    assert section["data"]["world"] == 2 and section["data"]["results"]["ddp"]["params"] > 0
