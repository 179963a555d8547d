"""What a run survives at the driver: a graceful stop, a killed driver, a corrupt latest checkpoint.

Each interrupted run is resumed with `python -m service.train --run-dir DIR --resume` and compared
with the fault-free reference run of the same config: the same metrics.jsonl and eval.jsonl rows
(timings aside; no step repeated or skipped) and bitwise the same final weights.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from fault_runs import (
    FAULT_TOTAL_STEPS,
    FinishedRun,
    TrainFile,
    assert_same_weights,
    checkpoint_steps,
    driver_run,
    fault_sets,
    final_weights,
    first_difference,
    run_to_end,
    stable_rows,
    summary,
    train_argv,
)

from trainer.checkpoint import load_checkpoint, step_dir_name

pytestmark = pytest.mark.slow

INTERRUPT_AT = 12  # a GRPO step (SFT is steps 1-4); checkpoints every 2 steps
RUN_TIMEOUT_S = 300.0
FROZEN_S = 1.5


def latest_registered(run_dir: Path) -> str:
    """The checkpoint Ray Train will hand to a resumed run (its checkpoint manager's latest)."""
    snapshot = json.loads((run_dir / "checkpoints" / "checkpoint_manager_snapshot.json").read_text())
    return snapshot["latest_checkpoint_result"]["checkpoint_dir_name"]


def resume(run_dir: Path, log: Path) -> FinishedRun:
    rc, output = run_to_end(train_argv(run_dir, (), resume=True), log, RUN_TIMEOUT_S)
    return FinishedRun(run_dir, rc, output)


def assert_same_as_reference(run_dir: Path, reference: FinishedRun) -> None:
    for name in ("metrics.jsonl", "eval.jsonl", "rollouts.jsonl"):
        ours, theirs = stable_rows(run_dir, name), stable_rows(reference.run_dir, name)
        assert ours == theirs, f"{name}: {first_difference(theirs, ours)}"
        assert theirs, f"{name}: the reference wrote none"


# --------------------------------------------------------------------------- graceful stop


@dataclass(frozen=True)
class StoppedRun:
    run_dir: Path
    returncode: int
    stop_s: float  # SIGTERM -> driver exit
    summary: dict
    checkpoints: list[int]


@pytest.fixture(scope="module")
def stopped_run(fault_root: Path, train_file: TrainFile) -> StoppedRun:
    """A run sent SIGTERM (what `ray job stop` sends first) at step INTERRUPT_AT or a little later."""
    run_dir = fault_root / "stopped"
    with driver_run(train_argv(run_dir, fault_sets(train_file.path)), fault_root / "stopped.log") as run:
        run.wait_for_step(INTERRUPT_AT, RUN_TIMEOUT_S)
        os.kill(run.pid, signal.SIGTERM)
        began = time.monotonic()
        rc = run.wait(120)
        stop_s = time.monotonic() - began
    return StoppedRun(run_dir, rc, stop_s, summary(run_dir), checkpoint_steps(run_dir))


def test_sigterm_stops_after_the_current_step_with_a_whole_checkpoint_of_it(stopped_run):
    s = stopped_run.summary
    print(f"SIGTERM -> exit: {stopped_run.stop_s:.1f}s; stopped at step {s['steps']}")
    assert stopped_run.returncode == 0
    assert s["status"] == "stopped" and INTERRUPT_AT <= s["steps"] < FAULT_TOTAL_STEPS
    assert s["last_checkpoint"] == step_dir_name(s["steps"]) == latest_registered(stopped_run.run_dir)
    assert max(stopped_run.checkpoints) == s["steps"]
    _, extra = load_checkpoint(
        stopped_run.run_dir / "checkpoints" / s["last_checkpoint"]
    )  # checks every file
    assert extra["step"] == s["steps"]


def test_a_stopped_run_resumes_exactly(stopped_run, reference_run):
    resumed = resume(stopped_run.run_dir, stopped_run.run_dir.parent / "stopped-resumed.log")
    s = summary(resumed.run_dir)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert s["status"] == "succeeded" and s["steps"] == FAULT_TOTAL_STEPS
    assert s["resumed_from"] == stopped_run.summary["steps"]
    assert_same_as_reference(resumed.run_dir, reference_run)
    assert_same_weights(
        final_weights(resumed.run_dir, FAULT_TOTAL_STEPS),
        final_weights(reference_run.run_dir, FAULT_TOTAL_STEPS),
    )


# --------------------------------------------------------------------------- killed driver


@dataclass(frozen=True)
class KilledRun:
    run_dir: Path
    latest: str  # the checkpoint Ray Train resumes from
    rows_before: int  # metrics.jsonl rows the driver wrote before it died


@pytest.fixture(scope="module")
def killed_run(fault_root: Path, train_file: TrainFile) -> KilledRun:
    """A run whose driver died mid-run (a job that fails) while its workers went on for a while.

    The driver is frozen (SIGSTOP) for FROZEN_S, then killed (SIGKILL): its Ray Train worker
    and reward workers keep stepping and checkpointing meanwhile, as they do for the second or
    two Ray takes to notice a dead driver, only long enough to be sure to happen.
    """
    run_dir = fault_root / "killed"
    with driver_run(train_argv(run_dir, fault_sets(train_file.path)), fault_root / "killed.log") as run:
        run.wait_for_step(INTERRUPT_AT, RUN_TIMEOUT_S)
        os.kill(run.pid, signal.SIGSTOP)
        time.sleep(FROZEN_S)
        os.kill(run.pid, signal.SIGKILL)
        run.wait(30)
        deadline = time.monotonic() + 20  # let the orphaned workers finish dying as they would under a job
        while run.ray_workers("RayTrainWorker") and time.monotonic() < deadline:
            time.sleep(0.2)
    rows = (run_dir / "metrics.jsonl").read_text().splitlines()
    latest = latest_registered(run_dir)
    assert int(latest.removeprefix("step_")) < FAULT_TOTAL_STEPS, "the run ended before its driver died"
    return KilledRun(run_dir, latest, len(rows))


@pytest.fixture(scope="module")
def corrupt_copy(fault_root: Path, killed_run: KilledRun) -> Path:
    """A copy of the killed run, taken before anything resumed it."""
    copy = fault_root / "corrupt"
    shutil.copytree(killed_run.run_dir, copy)
    return copy


@pytest.fixture(scope="module")
def killed_then_resumed(fault_root: Path, killed_run: KilledRun, corrupt_copy: Path) -> FinishedRun:
    return resume(killed_run.run_dir, fault_root / "killed-resumed.log")


def test_a_killed_driver_resumes_from_its_latest_checkpoint(killed_run, killed_then_resumed, reference_run):
    s = summary(killed_then_resumed.run_dir)
    assert killed_then_resumed.returncode == 0, killed_then_resumed.output[-3000:]
    assert s["status"] == "succeeded" and s["steps"] == FAULT_TOTAL_STEPS
    assert s["resumed_from"] == int(killed_run.latest.removeprefix("step_"))
    assert_same_weights(
        final_weights(killed_then_resumed.run_dir, FAULT_TOTAL_STEPS),
        final_weights(reference_run.run_dir, FAULT_TOTAL_STEPS),
    )


def test_a_killed_driver_loses_no_step_record(killed_run, killed_then_resumed, reference_run):
    """Every step up to the checkpoint resumed from was recorded before that checkpoint counted."""
    steps = [row["step"] for row in stable_rows(killed_then_resumed.run_dir)]
    missing = sorted(set(range(1, FAULT_TOTAL_STEPS + 1)) - set(steps))
    assert not missing, (
        f"steps {missing} have no metrics.jsonl row: the driver died after writing {killed_run.rows_before} "
        f"rows and the run resumed from {killed_run.latest}"
    )
    assert_same_as_reference(killed_then_resumed.run_dir, reference_run)


# --------------------------------------------------------------------------- corrupt checkpoint


def test_a_corrupt_latest_checkpoint_is_reported_and_the_previous_one_used(
    fault_root, killed_run, corrupt_copy, reference_run
):
    latest = corrupt_copy / "checkpoints" / killed_run.latest
    weights = latest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a copy cut short
    previous = max(step for step in checkpoint_steps(corrupt_copy) if step_dir_name(step) < latest.name)

    resumed = resume(corrupt_copy, fault_root / "corrupt-resumed.log")
    warnings = [line for line in resumed.output.splitlines() if "cannot be loaded" in line]
    assert warnings and str(latest) in warnings[0] and "model.safetensors" in warnings[0], resumed.output[
        -3000:
    ]
    assert f"resuming from the checkpoint of step {previous} " in resumed.output
    s = summary(corrupt_copy)
    assert s["resumed_from"] == previous
    assert resumed.returncode == 0 and s["status"] == "succeeded", s.get("error")
    assert_same_weights(
        final_weights(corrupt_copy, FAULT_TOTAL_STEPS),
        final_weights(reference_run.run_dir, FAULT_TOTAL_STEPS),
    )
