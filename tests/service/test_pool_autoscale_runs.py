"""Whole runs with `pool.autoscale`: a pool too small for a slow reward grows, a pool too large for a
cheap one shrinks to `min_workers`, and every step's rewards are those of a fixed pool.

The reward is `examples.rewards.misbehaving:slow` (the FEN reward plus 1.0 for an exact answer)
sleeping `GRPO_EXAMPLE_SLOW_S` an item: 10 ms (a pool of one worker waits most of each step) or
none (cheap). Each run starts its own Ray, whose workers inherit that setting.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.service.train_child import assert_ran, child_env, run_train

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SETS = (
    "pool.placement=pool",
    "reward.user=[{fn: 'examples.rewards.misbehaving:slow'}]",
    "grpo.steps=14",
    "grpo.eval_every=100",
)


def _run(run_dir: Path, slow_s: float, *sets: str) -> tuple[list[dict], str]:
    result = run_train(
        "--preset", "smoke", "--run-dir", str(run_dir), sets=(*SETS, *sets),
        env=child_env(GRPO_EXAMPLE_SLOW_S=str(slow_s)),
    )  # fmt: skip
    assert_ran(result)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["phase"] == "grpo"], result.stdout


def _rewards(rows: list[dict]) -> list[tuple]:
    return [(r["step"], r["reward_mean"], r["reward_components"], r["scorer_reward_items"]) for r in rows]


@pytest.fixture(scope="module")
def fixed(tmp_path_factory) -> list[dict]:
    rows, _ = _run(tmp_path_factory.mktemp("fixed") / "run", 0.01, "run.backend=local", "pool.num_workers=2")
    assert {r["pool_workers"] for r in rows} == {2.0}
    return rows


def test_a_pool_too_small_for_a_slow_reward_grows_and_scores_what_a_fixed_pool_scores(tmp_path, fixed):
    rows, out = _run(
        tmp_path / "grow", 0.01, "run.backend=local", "pool.num_workers=1",
        "pool.autoscale={min_workers: 1, max_workers: 3, target_wait_share: 0.2, cooldown_steps: 2}",
    )  # fmt: skip
    sizes = [r["pool_workers"] for r in rows]
    # how far it grows depends on how the machine's load stretches the rest of the step
    assert sizes[0] == 1.0 and sizes[-1] >= 2.0 and sizes == sorted(sizes), sizes
    changed = [r for r in rows if "pool_resized_to" in r]
    assert (
        changed
        and changed[0]["pool_resized_from"] == 1.0
        and changed[0]["pool_workers"] == changed[0]["pool_resized_to"]
    )
    assert (
        changed[0]["pool_resize_step"] < changed[0]["step"] and "above 0.2" in changed[0]["pool_resize_why"]
    )
    said = [line for line in out.splitlines() if line.startswith("[pool] after step ")]
    assert said and "1 -> " in said[0] and "reward workers: wait share" in said[0], out[-3000:]
    assert _rewards(rows) == _rewards(fixed)  # the same rewards, whichever workers scored them

    # resumed to train longer, the pool starts at the size its last checkpoint recorded
    result = run_train(
        "--run-dir", str(tmp_path / "grow"), "--resume", sets=("grpo.steps=16",),
        env=child_env(GRPO_EXAMPLE_SLOW_S="0.01"),
    )  # fmt: skip
    assert_ran(result)
    last = int(sizes[-1])
    assert f"[pool] {last} reward workers: the pool's size at step 20" in result.stdout, result.stdout[-3000:]
    more = [json.loads(line) for line in (tmp_path / "grow" / "metrics.jsonl").read_text().splitlines()]
    assert [r["pool_workers"] for r in more if r["step"] > 20][0] == sizes[-1]


def test_a_pool_too_large_for_a_cheap_reward_shrinks_to_min_workers_through_ray_train(tmp_path, fixed):
    rows, out = _run(
        tmp_path / "shrink", 0.0, "pool.num_workers=3",
        "pool.autoscale={min_workers: 1, max_workers: 3, cooldown_steps: 2}",
    )  # fmt: skip
    sizes = [r["pool_workers"] for r in rows]
    assert sizes[0] == 3.0 and sizes[-1] == 1.0 and sizes == sorted(sizes, reverse=True), sizes
    assert all("below 0.1" in r["pool_resize_why"] for r in rows if "pool_resized_to" in r)
    assert all(r["pool_workers_alive"] == r["pool_workers"] for r in rows)  # no worker was lost on the way
    assert _rewards(rows) == _rewards(fixed)
