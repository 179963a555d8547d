"""What a run survives below the driver: a killed trainer worker, reward workers killed again and again."""

from __future__ import annotations

import os
import signal

import pytest
from fault_runs import (
    FAULT_TOTAL_STEPS,
    RewardWorkerKiller,
    assert_same_weights,
    driver_run,
    fault_sets,
    final_weights,
    first_difference,
    read_rows,
    stable_rows,
    summary,
    train_argv,
)

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 300.0
# Every 3 s one reward worker process is killed, the two in turn, each once it has been up for 5 s
# (a restart takes 1-3 s on 2 busy CPUs): workers that keep dying while the run goes on. A storm
# faster than restarts is another matter (see the table in docs/guides/faults.md).
KILL_EVERY_S = 3.0
MIN_UPTIME_S = 5.0


def test_a_killed_trainer_worker_is_restarted_from_the_latest_checkpoint(
    fault_root, train_file, reference_run
):
    run_dir = fault_root / "trainer-killed"
    argv = train_argv(run_dir, fault_sets(train_file.path, "run.max_failures=1"))
    with driver_run(argv, fault_root / "trainer-killed.log") as run:
        run.wait_for_step(12, RUN_TIMEOUT_S)
        workers = run.ray_workers("RayTrainWorker")
        assert len(workers) == 1, workers
        os.kill(workers[0].pid, signal.SIGKILL)
        rc = run.wait(RUN_TIMEOUT_S)
        output = run.output
    s = summary(run_dir)
    assert rc == 0 and s["status"] == "succeeded" and s["steps"] == FAULT_TOTAL_STEPS, s.get("error")
    # The restart is on record: the summary names the checkpoint the new worker group started from.
    assert s["resumed_from"] and s["resumed_from"] % 2 == 0 and s["resumed_from"] < FAULT_TOTAL_STEPS
    assert f"resuming from the checkpoint of step {s['resumed_from']} " in output
    rows, expected = stable_rows(run_dir), stable_rows(reference_run.run_dir)
    assert rows == expected, first_difference(expected, rows)
    assert_same_weights(
        final_weights(run_dir, FAULT_TOTAL_STEPS), final_weights(reference_run.run_dir, FAULT_TOTAL_STEPS)
    )


def test_reward_workers_killed_repeatedly_change_no_reward(fault_root, train_file, reference_run):
    run_dir = fault_root / "reward-kills"
    with driver_run(train_argv(run_dir, fault_sets(train_file.path)), fault_root / "reward-kills.log") as run:
        run.wait_for_step(1, RUN_TIMEOUT_S)
        with RewardWorkerKiller(run, KILL_EVERY_S, MIN_UPTIME_S) as killer:
            rc = run.wait(RUN_TIMEOUT_S)
    s = summary(run_dir)
    print(f"{len(killer.kills)} reward worker kills at steps {[step for _, step in killer.kills]}")
    assert rc == 0 and s["status"] == "succeeded", s.get("error")
    assert len(killer.kills) >= 3
    rows = read_rows(run_dir / "metrics.jsonl")
    assert sum(row.get("scorer_worker_restarts", 0) for row in rows) >= 1  # the pool saw them come back
    rewards = [(row["step"], row.get("reward_mean")) for row in rows]
    expected = [
        (row["step"], row.get("reward_mean")) for row in read_rows(reference_run.run_dir / "metrics.jsonl")
    ]
    errors = {row["step"]: row["scorer_reward_errors"] for row in rows if row.get("scorer_reward_errors")}
    assert rewards == expected, f"{first_difference(expected, rewards)}; steps with reward errors: {errors}"
