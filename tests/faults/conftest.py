"""Shared fixtures of the fault tests: the training file with bad lines and one fault-free run.

The fault-free run is the reference every interrupted run is compared with; it is made once per
test session (a driver run costs ~30 s on 2 CPUs, mostly Ray and Ray Train start-up).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fault_runs import FinishedRun, TrainFile, fault_sets, run_to_end, train_argv, write_jsonl_with_garbage


@pytest.fixture(scope="session")
def fault_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="session")
def train_file(fault_root: Path) -> TrainFile:
    path = fault_root / "train-with-garbage.jsonl"
    good, bad = write_jsonl_with_garbage(path)
    return TrainFile(path, good, bad)


@pytest.fixture(scope="session")
def reference_run(fault_root: Path, train_file: TrainFile) -> FinishedRun:
    """The fault-free run of FAULT_SETS on `train_file`."""
    run_dir = fault_root / "reference"
    rc, output = run_to_end(train_argv(run_dir, fault_sets(train_file.path)), fault_root / "reference.log")
    return FinishedRun(run_dir, rc, output)
