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

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 240.0
RUN_NAME = "storage-fault"
TOTAL_STEPS = 4 + 12
EVERY = 6  # checkpoints at 6, 12 and 16: the fault comes after step 7, so 6 is the last good one
TMPFS_BYTES = 32 * 1024 * 1024  # room for a few checkpoints of the smoke model (~0.3 MB each)


def storage_sets(store: Path) -> tuple[str, ...]:
    return (
        *FAULT_SETS,
        "grpo.steps=12",
        f"checkpoint.every_steps={EVERY}",
        f"run.storage_path={store}",
        f"run.name={RUN_NAME}",
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
        with open(self.filler, "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
                os.fsync(f.fileno())
        # The last partial block may have fit: fill the rest one small write at a time.
        with open(self.filler, "ab") as f:
            with pytest.raises(OSError) as info:
                for _ in range(4096):
                    f.write(b"\0" * 4096)
                    f.flush()
                    os.fsync(f.fileno())
            assert info.value.errno == errno.ENOSPC

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
        (self.store / RUN_NAME / "checkpoints").chmod(0o555)

    def repair(self) -> None:
        (self.store / RUN_NAME / "checkpoints").chmod(0o755)

    def cleanup(self) -> None:
        with contextlib.suppress(OSError):
            self.repair()


@pytest.mark.parametrize("fault_type", [Vanished, DiskFull, PermissionDenied], ids=lambda f: f.__name__)
def test_failing_checkpoint_storage_stops_the_run_and_keeps_the_last_good_checkpoint(fault_type, tmp_path):
    store, run_dir = tmp_path / "store", tmp_path / "run"
    fault = fault_type(store)
    try:
        argv = [*fault.argv_prefix, *train_argv(run_dir, storage_sets(store))]
        with driver_run(argv, tmp_path / "run.log") as run:
            run.wait_for_step(EVERY + 1, RUN_TIMEOUT_S)
            fault.inject()
            rc = run.wait(RUN_TIMEOUT_S)
            output = run.output
        s = summary(run_dir)
        assert rc == 1 and s["status"] == "failed", output[-3000:]
        failed = re.search(
            r"CheckpointWriteError: checkpoint step_(\d+) could not be written to (\S+)", s["error"]
        )
        assert failed, s["error"]
        assert any(text in s["error"] for text in fault.expected), s["error"]
        assert "--resume" in s["error"] and "\n" not in s["error"]
        last_good = EVERY if int(failed.group(1)) == 2 * EVERY else 2 * EVERY  # the fault may come late
        assert s["last_checkpoint"] == step_dir_name(last_good), s
        fault.repair()
        _, extra = load_checkpoint(store / RUN_NAME / "checkpoints" / step_dir_name(last_good))
        assert extra["step"] == last_good
        if fault_type is Vanished:  # once the volume is back, the run goes on from there
            resume = [*fault.argv_prefix, *train_argv(run_dir, storage_sets(store), resume=True)]
            with driver_run(resume, tmp_path / "resume.log") as run:
                rc = run.wait(RUN_TIMEOUT_S)
            s = summary(run_dir)
            assert rc == 0 and s["status"] == "succeeded" and s["resumed_from"] == last_good, s
    finally:
        fault.cleanup()
