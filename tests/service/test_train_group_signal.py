"""SIGTERM to a run's whole process group (what `timeout`, a shell's job control and service
managers send) stops it as cleanly as Ctrl-C: the Ray it starts runs in groups of its own, so the
driver alone gets the signal, finishes the step, checkpoints and writes `stopped`.

The run is started in a session of its own (`setsid`: Popen's start_new_session) and the signal
sent to its group (`kill -TERM -PGID`: os.killpg). Its own Ray, as the Quickstart's: the test is
about Ray's processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from service.progress import PROGRESS_PREFIX
from tests.service.train_child import REPO, child_env, train_argv

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GUARD_S = 300  # against a hang only: an idle run of the smoke preset takes about 20 s


def _group(pgid: int) -> list[str]:
    """The command lines of the processes in group `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == pgid:
                members.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
        except (ProcessLookupError, OSError):
            continue
    return members


def test_sigterm_to_the_process_group_stops_the_run_after_its_current_step(tmp_path):
    run_dir = tmp_path / "run"
    argv = train_argv(
        "--preset", "smoke", "--run-dir", str(run_dir), sets=["grpo.steps=300", "run.log_interval_s=0"]
    )
    driver = subprocess.Popen(
        argv, cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    guard = threading.Timer(GUARD_S, lambda: os.killpg(driver.pid, signal.SIGKILL))
    guard.start()
    lines, signalled_at, group = [], None, []
    try:
        for line in driver.stdout:
            lines.append(line)
            if signalled_at is None and line.startswith(PROGRESS_PREFIX):
                record = json.loads(line[len(PROGRESS_PREFIX) :])
                if record["phase"] == "grpo":
                    group = _group(driver.pid)
                    os.killpg(driver.pid, signal.SIGTERM)
                    signalled_at = record["step"]
        code = driver.wait()
    finally:
        guard.cancel()
    logs = "".join(lines)
    assert signalled_at is not None, logs[-4000:]
    assert len(group) == 1 and "service.train" in group[0], group  # Ray's processes are elsewhere
    assert code == 0, logs[-4000:]
    assert "received SIGTERM: stopping after the current step" in logs
    assert "Failed to connect to GCS" not in logs
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["steps"] >= signalled_at, summary
    assert summary["steps"] < summary["total_steps"] and summary["last_checkpoint"], summary
