"""Shared fixtures of the fault tests: the training file with bad lines and one fault-free run.

The fault-free run is the reference every interrupted run is compared with; it is made once per
test session (a driver run costs ~30 s on 2 CPUs, mostly Ray and Ray Train start-up). Under
pytest-xdist the workers share the folder of the fault runs (the base temp folder's parent is
common to them), and the first worker that needs the file or the reference makes it under a file
lock while the others wait and read it: one reference run, not one per worker.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_runs import FinishedRun, TrainFile, fault_sets, run_to_end, train_argv, write_jsonl_with_garbage


@pytest.fixture(scope="session")
def fault_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "faults"
    root.mkdir(exist_ok=True)
    return root


@contextlib.contextmanager
def _made_once(root: Path, name: str) -> Iterator[Path | None]:
    """Under a lock on `name`: None when its record is already there (read it), else the record's
    path to write once made."""
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = root / f"{name}.json"
        yield None if record.exists() else record


@pytest.fixture(scope="session")
def train_file(fault_root: Path) -> TrainFile:
    path = fault_root / "train-with-garbage.jsonl"
    with _made_once(fault_root, "train-file") as record:
        if record is not None:
            record.write_text(json.dumps(write_jsonl_with_garbage(path)))
        good, bad = json.loads((fault_root / "train-file.json").read_text())
    return TrainFile(path, good, bad)


@pytest.fixture(scope="session")
def reference_run(fault_root: Path, train_file: TrainFile) -> FinishedRun:
    """The fault-free run of FAULT_SETS on `train_file`."""
    run_dir = fault_root / "reference"
    with _made_once(fault_root, "reference") as record:
        if record is not None:
            rc, output = run_to_end(
                train_argv(run_dir, fault_sets(train_file.path)), fault_root / "reference.log"
            )
            record.write_text(json.dumps([rc, output]))
        rc, output = json.loads((fault_root / "reference.json").read_text())
    return FinishedRun(run_dir, rc, output)
