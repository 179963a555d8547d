"""The autoscaled pool's size rule (`actors.pool.autoscale.PoolSizer`) on step records, and the
config it refuses."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from actors.pool.autoscale import PoolSizer, StepLoad
from actors.pool.config import AutoscaleConfig, PoolConfig

CFG = AutoscaleConfig(min_workers=1, max_workers=6, target_wait_share=0.2, cooldown_steps=2)


def row(
    step: int, workers: int, wait_s: float, step_s: float = 1.0, items: float = 16, cost: float | None = 0.05
):
    r = {
        "step": step,
        "phase": "grpo",
        "pool_workers": workers,
        "reward_wait_s": wait_s,
        "step_time_s": step_s,
    }
    r["scorer_reward_items"] = items
    if cost is not None:
        r["pool_seconds_per_item"] = cost
    return r


def test_the_pool_grows_after_cooldown_steps_above_the_target_to_what_the_measured_cost_wants():
    sizer = PoolSizer(CFG, workers=1, total_steps=100)
    assert sizer.observe(row(1, 1, wait_s=0.7)) is None  # one step above is not yet a trend
    resize = sizer.observe(row(2, 1, wait_s=0.7))
    # work 0.8 s a step; 0.3 s besides waiting fits 0.075 s of wait; 0.1 s of scoring is hidden
    assert resize is not None and (resize.step, resize.workers_from, resize.workers_to) == (2, 1, 5)
    assert "wait share 0.70 above 0.2" in resize.why and "5 wanted" in resize.why
    wanted = StepLoad.of(row(2, 5, wait_s=0.06)).wanted(0.2)
    assert wanted is not None and wanted <= 5  # at the size chosen, the wait fits the target


def test_steps_run_at_another_size_do_not_count_and_a_resize_starts_the_count_again():
    sizer = PoolSizer(CFG, workers=1, total_steps=100)
    assert sizer.observe(row(1, 1, wait_s=0.7)) is None
    assert sizer.observe(row(2, 3, wait_s=0.7)) is None  # a record of another size: ignored
    resize = sizer.observe(row(3, 1, wait_s=0.7))
    assert resize is not None
    sizer.resized(resize.workers_to)
    assert sizer.observe(row(4, 1, wait_s=0.7)) is None  # still the old size: the ranks follow next step
    assert sizer.observe(row(5, resize.workers_to, wait_s=0.7)) is None  # the count starts again
    assert sizer.observe(row(6, resize.workers_to, wait_s=0.7)).workers_to == 6  # capped at max_workers


def test_a_cheap_reward_shrinks_the_pool_step_by_step_to_min_workers():
    sizer = PoolSizer(CFG, workers=4, total_steps=100)
    sizes, step = [4], 0
    while sizes[-1] > CFG.min_workers and step < 40:
        step += 1
        resize = sizer.observe(row(step, sizes[-1], wait_s=0.001, step_s=0.05, cost=0.0001))
        if resize is not None:
            sizer.resized(resize.workers_to)
            sizes.append(resize.workers_to)
            assert "below 0.1" in resize.why
    assert sizes[-1] == CFG.min_workers and sizes == sorted(sizes, reverse=True), sizes


def test_a_pool_whose_workers_are_all_needed_does_not_shrink():
    sizer = PoolSizer(CFG, workers=4, total_steps=100)
    # a low wait only because 4 workers score 3.2 s of work behind sampling: 4 are wanted
    for step in range(1, 6):
        assert sizer.observe(row(step, 4, wait_s=0.01, step_s=1.0, items=16, cost=0.2)) is None


def test_without_a_measured_cost_the_pool_doubles_and_sheds_one():
    grow = PoolSizer(CFG, workers=2, total_steps=100)
    grow.observe(row(1, 2, wait_s=0.7, cost=None))
    assert grow.observe(row(2, 2, wait_s=0.7, cost=None)).workers_to == 4
    shrink = PoolSizer(CFG, workers=4, total_steps=100)
    shrink.observe(row(1, 4, wait_s=0.0, cost=None))
    assert shrink.observe(row(2, 4, wait_s=0.0, cost=None)).workers_to == 3


def test_a_worker_start_up_dearer_than_the_wait_it_saves_keeps_the_size():
    sizer = PoolSizer(CFG, workers=1, total_steps=10)
    sizer.resized(1, setup_s=30.0)  # a worker took 30 s to start (an engine, a warm sandbox)
    sizer.observe(row(8, 1, wait_s=0.7))
    assert sizer.observe(row(9, 1, wait_s=0.7)) is None  # one step left saves under a second


def test_sft_rows_and_rows_without_a_pool_are_not_read():
    sizer = PoolSizer(CFG, workers=1, total_steps=100)
    for step in range(1, 5):
        assert sizer.observe({"step": step, "phase": "sft", "step_time_s": 1.0}) is None
        assert (
            sizer.observe({"step": step, "phase": "grpo", "step_time_s": 1.0, "reward_wait_s": 0.9}) is None
        )


@pytest.mark.parametrize(
    ("pool", "says"),
    [
        ({"autoscale": {"min_workers": 3, "max_workers": 2}}, "min_workers (3) must be <= max_workers (2)"),
        ({"autoscale": {"target_wait_share": 1.0}}, "less than 1"),
        ({"autoscale": {"target_wait_share": 0.0}}, "greater than 0"),
        (
            {"num_workers": 5, "autoscale": {"max_workers": 4}},
            "must be within autoscale.min_workers..max_workers (1..4)",
        ),
        (
            {"num_workers": 1, "placement": "inline", "autoscale": {}},
            "placement=inline scores in the trainer's process",
        ),
    ],
)
def test_an_autoscale_config_that_cannot_work_is_refused(pool, says):
    with pytest.raises(ValidationError, match=None) as caught:
        PoolConfig.model_validate(pool)
    assert says in str(caught.value)


def test_a_resumed_autoscaled_pool_starts_at_the_size_its_newest_checkpoint_recorded(tmp_path):
    from service.pool_resizer import starting_pool

    cfg = PoolConfig(num_workers=1, autoscale={"min_workers": 1, "max_workers": 4})
    assert starting_pool(cfg, tmp_path) == (cfg, None)  # nothing to resume
    for step, workers in ((4, 2), (8, 3)):
        (tmp_path / f"step_{step:06d}").mkdir()
        (tmp_path / f"step_{step:06d}" / "extra.json").write_text(json.dumps({"pool_workers": workers}))
    resumed, at = starting_pool(cfg, tmp_path)
    assert (resumed.num_workers, at) == (3, 8)
    fixed = PoolConfig(num_workers=2)
    assert starting_pool(fixed, tmp_path) == (fixed, None)  # a fixed pool keeps its configured size
    narrower = PoolConfig(num_workers=1, autoscale={"min_workers": 1, "max_workers": 2})
    assert starting_pool(narrower, tmp_path) == (narrower, None)  # 3 is outside the new bounds
