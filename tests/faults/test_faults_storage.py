"""Checkpoint storage that fails mid-run: the path vanishes, the disk is full, permission is denied.

Each is a real failure of the file system under `run.storage_path` (where Ray Train persists the
checkpoints), made while the run trains: the storage directory replaced by a file (an unmounted
volume), a small tmpfs filled up, a directory made read-only for a driver running without root's
permission override. The rule under test: the run stops at the first checkpoint it cannot write,
status `failed` with a reason naming the checkpoint, the storage and the OS error, exit 1; the
checkpoints written before stay whole, and once the storage is fixed `--resume` continues from
the last good one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fault_runs import FAULT_SETS, driver_run, summary, train_argv

from trainer.checkpoint import load_checkpoint, step_dir_name

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

RUN_TIMEOUT_S = 600.0  # a loaded 2-core machine runs these steps 10-50x slower than an idle one
RUN_NAME = "storage-fault"
START_ATTEMPTS = 3
TOTAL_STEPS = 4 + 12
EVERY = 3  # checkpoints at 3, 6, 9, ...
FAULT_AFTER = 7  # the step after which the storage fails
TMPFS_BYTES = 32 * 1024 * 1024  # room for a few checkpoints of the smoke model (~0.3 MB each)


def storage_sets(store: Path, name: str) -> tuple[str, ...]:
    return (
        *FAULT_SETS,
        "grpo.steps=12",
        f"checkpoint.every_steps={EVERY}",
        f"run.storage_path={store}",
        f"run.name={name}",
    )


class Vanished:
    """The storage directory goes away (a volume unmounted) and a plain file takes its path."""

    expected = ("Not a directory", "File exists", "No such file")
    argv_prefix: tuple[str, ...] = ()

    def __init__(self, store: Path):
        self.store, self.away = store, store.with_name(store.name + "-away")

    def inject(self) -> None:
        self.store.rename(self.away)
        self.store.write_text("the volume is gone\n")

    def repair(self) -> None:
        self.store.unlink()
        self.away.rename(self.store)

    def cleanup(self) -> None:
        pass


class DiskFull:
    """The storage is a small tmpfs, filled to the last byte by another writer."""

    expected = ("No space left",)
    argv_prefix: tuple[str, ...] = ()

    def __init__(self, store: Path):
        self.store = store
        store.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(store)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs to fill up here: {done.stderr.strip()}")
        self.filler = store / "filler"

    def inject(self) -> None:
        with open(self.filler, "wb", buffering=0) as f:
            for size in (1 << 20, 4096, 1):  # big writes, then the last bytes
                with pytest.raises(OSError) as info:
                    while True:
                        f.write(b"\0" * size)
                assert info.value.errno == errno.ENOSPC
        assert os.statvfs(self.store).f_bavail == 0

    def repair(self) -> None:
        self.filler.unlink()

    def cleanup(self) -> None:
        subprocess.run(["umount", "-l", str(self.store)], check=False)


class PermissionDenied:
    """The checkpoint directory turns read-only; the run (driver and Ray) runs as root without
    CAP_DAC_OVERRIDE, so the mode bites as it would for any other user."""

    expected = ("Permission denied",)
    argv_prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--")

    def __init__(self, store: Path):
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv (util-linux) is needed to drop root's permission override")
        self.store = store

    def inject(self) -> None:
        for checkpoints in self.store.glob("*/checkpoints"):
            checkpoints.chmod(0o555)

    def repair(self) -> None:
        for checkpoints in self.store.glob("*/checkpoints"):
            checkpoints.chmod(0o755)

    def cleanup(self) -> None:
        with contextlib.suppress(OSError):
            self.repair()


def run_into_the_fault(fault, store: Path, tmp_path: Path) -> tuple[Path, str, int, str]:
    """(run dir, run name, exit code, output) of a run whose storage fails after step FAULT_AFTER.

    A run whose own Ray could not start at all ('timed out during startup', which a machine
    loaded by other work can cause) is tried again under a new name; any other ending is the result.
    """
    for attempt in range(START_ATTEMPTS):
        name, run_dir = f"{RUN_NAME}-{attempt}", tmp_path / f"run-{attempt}"
        argv = [*fault.argv_prefix, *train_argv(run_dir, storage_sets(store, name))]
        with driver_run(argv, tmp_path / f"run-{attempt}.log") as run:
            try:
                run.wait_for_step(FAULT_AFTER, RUN_TIMEOUT_S)
            except AssertionError:
                if "timed out during startup" in run.output and attempt < START_ATTEMPTS - 1:
                    continue
                raise
            fault.inject()
            return run_dir, name, run.wait(RUN_TIMEOUT_S), run.output
    raise AssertionError("unreachable")


@pytest.mark.parametrize("fault_type", [Vanished, DiskFull, PermissionDenied], ids=lambda f: f.__name__)
def test_failing_checkpoint_storage_stops_the_run_and_keeps_the_last_good_checkpoint(fault_type, tmp_path):
    store = tmp_path / "store"
    fault = fault_type(store)
    try:
        run_dir, name, rc, output = run_into_the_fault(fault, store, tmp_path)
        s = summary(run_dir)
        assert rc == 1 and s["status"] == "failed", output[-3000:]
        error = s["error"]
        # From rank 0 ("checkpoint step_N ...") or from Ray Train's controller writing its own
        # records to the same storage ("checkpoints ..."), whichever meets the fault first.
        failed = re.search(
            r"CheckpointWriteError: (checkpoint step_\d+|checkpoints) could not be written to (\S+)", error
        )
        assert failed and f"/{name}/checkpoints" in failed.group(2), error
        assert any(text in error for text in fault.expected), error
        assert "--resume" in error and "\n" not in error
        last_good = int(str(s["last_checkpoint"]).removeprefix("step_"))
        assert EVERY <= last_good <= 4 * EVERY, s  # written before the fault, or just as it came
        fault.repair()
        _, extra = load_checkpoint(store / name / "checkpoints" / step_dir_name(last_good))
        assert extra["step"] == last_good
        if fault_type is Vanished:  # once the volume is back, the run goes on from there
            resume = [*fault.argv_prefix, *train_argv(run_dir, storage_sets(store, name), resume=True)]
            with driver_run(resume, tmp_path / "resume.log") as run:
                rc = run.wait(RUN_TIMEOUT_S)
            s = summary(run_dir)
            # From the latest checkpoint Ray Train had registered: the last good one or the one before.
            assert rc == 0 and s["status"] == "succeeded", s
            assert s["resumed_from"] and last_good - EVERY <= s["resumed_from"] <= last_good, s
    finally:
        fault.cleanup()
