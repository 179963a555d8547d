"""`pool.autoscale` refused before the run, in one line (exit 2, no run directory, no Ray)."""

from __future__ import annotations

import pytest

from tests.service.train_child import child_env, run_train


@pytest.mark.parametrize(
    ("preset", "sets", "says"),
    [
        (
            "smoke",
            ("pool.autoscale={min_workers: 3, max_workers: 2}",),
            "min_workers (3) must be <= max_workers (2)",
        ),
        ("smoke", ("pool.autoscale={target_wait_share: 1.5}",), "target_wait_share"),
        ("smoke", ("pool.placement=inline", "pool.num_workers=1", "pool.autoscale={}"), "placement=inline"),
        (
            "env-smoke",
            ("pool.num_workers=1", "pool.autoscale={}"),
            "an environment task's pool plays episodes",
        ),
        (
            "smoke",
            ("pool.num_workers=1", "pool.autoscale={}", "sampling.placement=actors"),
            "the sampler actors score on a pool of fixed size",
        ),
    ],
)
def test_an_autoscale_that_cannot_work_is_refused_before_the_run_in_one_line(tmp_path, preset, sets, says):
    run_dir = tmp_path / "run"
    result = run_train("--preset", preset, "--run-dir", str(run_dir), sets=sets, env=child_env())
    assert result.returncode == 2 and not run_dir.exists(), result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in result.stderr, result.stderr
