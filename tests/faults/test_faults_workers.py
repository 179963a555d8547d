"""What a run survives below the driver: a killed trainer worker, reward workers killed again and again."""

from __future__ import annotations

import os
import signal
import time

import pytest
from fault_runs import (
    FAULT_TOTAL_STEPS,
    EveryTick,
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


class RewardWorkerKiller(EveryTick):
    """SIGKILLs one of a run's reward worker processes every `kill_every_s` (looking every 0.1 s),
    in turn, choosing only processes that have been up for at least `min_uptime_s`."""

    def __init__(self, run, kill_every_s: float, min_uptime_s: float):
        super().__init__(0.1, name="reward-worker-killer")
        self.run, self.kill_every_s, self.min_uptime_s = run, kill_every_s, min_uptime_s
        self.kills: list[tuple[int, int]] = []  # (pid, last step printed)
        self._last_kill, self._turn = 0.0, 0

    def tick(self) -> None:
        if time.monotonic() - self._last_kill < self.kill_every_s:
            return
        workers = sorted(self.run.ray_workers("RewardWorker"), key=lambda p: p.pid)
        ready = [p.pid for p in workers if p.age_s() >= self.min_uptime_s]
        if not ready:
            return
        victim = ready[self._turn % len(ready)]
        self._turn += 1
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            return
        self._last_kill = time.monotonic()
        self.kills.append((victim, self.run.last_step()))


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
