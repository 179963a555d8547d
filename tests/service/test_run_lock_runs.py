"""One writer per run directory, with whole `python -m service.train` runs (smoke preset).

1. Two drivers started at the same instant on one directory: one runs, the other is refused
   naming it; a `--resume` while it runs is refused the same way; the run's records stay whole.
2. A driver SIGKILLed mid-run leaves its lock behind: `--resume` takes it over, saying so.

The drivers run through the fault tests' helpers (`tests/faults/fault_runs.py`): a session of
their own with their own embedded Ray, killed whole on the way out.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from fault_runs import DriverRun, driver_run, read_rows, summary, train_argv  # noqa: E402

from service.run_lock import LOCK_FILE, Owner  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
RUN_TIMEOUT_S = 240.0
SMOKE_STEPS = 6 + 4


def _wait_first_exit(runs: list[DriverRun], timeout_s: float) -> DriverRun:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for run in runs:
            if run.proc.poll() is not None:
                run.wait(10)
                return run
        time.sleep(0.1)
    raise AssertionError("neither driver ended:\n" + "\n---\n".join(r.tail() for r in runs))


def _refusal(run: DriverRun) -> str:
    lines = [line for line in run.lines if line.startswith("config error: ")]
    assert len(lines) == 1 and "Traceback" not in run.output, run.output
    return lines[0]


def _open_by(run: DriverRun, lock: Path) -> set[int]:
    """The processes of the run's session with the lock file open right now."""
    holders = set()
    for proc in run.session_processes():
        with contextlib.suppress(OSError):  # exited while we looked
            for fd in Path(f"/proc/{proc.pid}/fd").iterdir():
                with contextlib.suppress(OSError):  # closed while we looked
                    if os.readlink(fd) == str(lock):
                        holders.add(proc.pid)
    return holders


def _lock_holders(run: DriverRun, lock: Path, apart_s: float = 1.0) -> list[int]:
    """The processes that hold the lock file open in two looks `apart_s` apart.

    A child the driver forks holds every descriptor of its parent until its exec closes them
    (a millisecond): one look can catch it. A process that inherited the lock keeps it.
    """
    first = _open_by(run, lock)
    time.sleep(apart_s)
    return sorted(first & _open_by(run, lock))


def _steps(run_dir: Path, name: str = "metrics.jsonl") -> list[int]:
    return [row["step"] for row in read_rows(run_dir / name)]


def test_two_drivers_at_once_one_runs_and_the_other_and_a_resume_are_refused(tmp_path):
    run_dir = tmp_path / "same"
    argv = train_argv(run_dir, ())
    with driver_run(argv, tmp_path / "first.log") as one, driver_run(argv, tmp_path / "second.log") as two:
        loser = _wait_first_exit([one, two], RUN_TIMEOUT_S)
        winner = two if loser is one else one
        assert loser.proc.returncode == 2, loser.output
        assert winner.proc.poll() is None, f"the winner ended first:\n{winner.tail()}"
        refused = _refusal(loser)
        assert f"run.run_dir: '{run_dir}' is in use by a live run: pid {winner.pid} on host " in refused
        assert "--resume" not in refused  # no advice to resume a live run

        with driver_run(train_argv(run_dir, (), resume=True), tmp_path / "resume.log") as resume:
            assert resume.wait(RUN_TIMEOUT_S) == 2, resume.output
        refused = _refusal(resume)
        assert refused.startswith(
            f"config error: --resume: '{run_dir}' is in use by a live run: pid {winner.pid} "
        )
        assert winner.proc.poll() is None, "the refused --resume came after the run's end: nothing was tested"
        assert _lock_holders(winner, run_dir / LOCK_FILE) == [winner.pid]  # Ray's processes never inherit it
        assert not (run_dir / "summary.json").exists()  # the refused drivers wrote nothing there

        assert winner.wait(RUN_TIMEOUT_S) == 0, winner.tail()
    s = summary(run_dir)
    assert s["status"] == "succeeded" and s["steps"] == SMOKE_STEPS and s["resumed_from"] is None
    assert _steps(run_dir) == list(range(1, SMOKE_STEPS + 1))  # each step once, from one writer
    evals = _steps(run_dir, "eval.jsonl")
    assert len(evals) == len(set(evals)), evals
    assert not (run_dir / LOCK_FILE).exists()  # released at the end


def _registered_step(run_dir: Path) -> int | None:
    """The step of the checkpoint Ray Train would resume from (its checkpoint manager's latest)."""
    try:
        snapshot = json.loads((run_dir / "checkpoints" / "checkpoint_manager_snapshot.json").read_text())
        return int(snapshot["latest_checkpoint_result"]["checkpoint_dir_name"].removeprefix("step_"))
    except (OSError, ValueError, KeyError, TypeError):  # not yet written, or being replaced
        return None


def test_a_killed_run_is_resumed_taking_over_its_lock(tmp_path):
    run_dir = tmp_path / "killed"
    # The kill lands at the first checkpoint registered (a checkpoint every 4 steps) and the ranks
    # stop at the next one: 20 GRPO steps leave the resume most of the run.
    sets = ("grpo.steps=20", "grpo.eval_every=10")
    total = 6 + 20
    with driver_run(train_argv(run_dir, sets), tmp_path / "killed.log") as run:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while _registered_step(run_dir) is None and run.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(run.pid, signal.SIGSTOP)  # no more records drained: the ranks wait at the next checkpoint
        killed_pid = run.pid
    # driver_run's end SIGKILLed the driver and its Ray
    owner = Owner.decode((run_dir / LOCK_FILE).read_bytes())
    assert owner is not None and owner.pid == killed_pid  # the lock file a killed driver leaves
    registered = _registered_step(run_dir)
    assert not (run_dir / "summary.json").exists() and registered is not None and registered < total

    with driver_run(train_argv(run_dir, (), resume=True), tmp_path / "resumed.log") as resumed:
        assert resumed.wait(RUN_TIMEOUT_S) == 0, resumed.tail()
    took = [line for line in resumed.lines if "took over the lock of" in line]
    assert len(took) == 1 and f"the run that held it is gone (pid {killed_pid} on host " in took[0], took
    s = summary(run_dir)
    assert s["status"] == "succeeded" and s["steps"] == total and s["resumed_from"] == registered
    assert _steps(run_dir) == list(range(1, total + 1))
    assert not (run_dir / LOCK_FILE).exists()
