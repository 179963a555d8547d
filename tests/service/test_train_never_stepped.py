"""A driver that dies before its first step (as one whose Ray fails to start does: killed at once,
no summary) leaves its directory free: the same command starts afresh there and succeeds; then
the same command with `--resume` is taken (the run has nothing left to do, and says so)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from tests.service.train_child import REPO, run_train, shared_env, train_argv

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GUARD_S = 120.0  # against a hang only: the config is written within seconds of the start


def test_the_same_command_runs_again_where_a_driver_died_before_its_first_step(tmp_path):
    run_dir = tmp_path / "run"
    args = ("--preset", "smoke", "--run-dir", str(run_dir))
    sets = ["run.backend=local"]
    driver = subprocess.Popen(
        train_argv(*args, sets=sets), cwd=REPO, env=shared_env(), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + GUARD_S
    while not (run_dir / "config.yaml").exists() and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    assert (run_dir / "config.yaml").exists()
    metrics = run_dir / "metrics.jsonl"
    assert not (metrics.exists() and metrics.read_text().strip()), "a step was recorded before the kill"

    again = run_train(*args, sets=sets, env=shared_env())
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert (
        "held a run that never took a step (no metrics, no checkpoint); starting afresh there" in again.stdout
    )
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "succeeded"

    resumed = run_train(*args, "--resume", sets=sets, env=shared_env())
    assert resumed.returncode == 2 and "already succeeded at step 10 of 10" in resumed.stderr, resumed.stderr
