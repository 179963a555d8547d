"""A checkpoint writer killed at any moment leaves the latest checkpoint whole (old or new, never partial).

A damaged latest checkpoint falling back to the previous one is tested in
tests/trainer/test_checkpoint.py and, through a resumed run, in test_faults_resume.py.

A child process writes checkpoints of a ~8 MB state in a loop (`trainer.checkpoint.save_checkpoint`,
as rank 0 does) and prints each step once its save returned; the test kills it with SIGKILL (what
follows SIGTERM when `ray job stop`'s grace runs out) at random moments, several times over the
same directory, like a run that is stopped and resumed again and again.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from fault_runs import REPO, clean_env

from trainer.checkpoint import list_checkpoints, load_checkpoint, load_latest

WRITER = """
import sys, torch
from trainer.checkpoint import list_checkpoints, save_checkpoint
root = sys.argv[1]
found = list_checkpoints(root)
step = found[0][0] if found else 0
while True:
    step += 1
    weights = {f"w{i}": torch.full((256, 1024), float(step)) for i in range(8)}  # 8 MiB
    save_checkpoint(root, step, {"model": weights, "counters": {"step": step}}, {"step": step}, keep_last=2)
    print(step, flush=True)
"""
KILLS = 5


def test_a_writer_killed_mid_save_leaves_a_whole_latest_checkpoint(tmp_path: Path):
    root = tmp_path / "checkpoints"
    rng = random.Random(1234)
    last_saved = torn = 0
    for _ in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root)], cwd=REPO, env=clean_env(),
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert child.stdout is not None
            first = int(child.stdout.readline())  # one save done: the next one is under way
            assert first == last_saved + 1 or last_saved == 0
            time.sleep(rng.uniform(0.0, 0.15))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        done = [int(line) for line in child.stdout.read().split()] if child.stdout else []
        last_saved = max([first, *done])
        torn += any(root.glob(".tmp-*"))  # the kill landed inside a save
        newest_step, newest = list_checkpoints(root)[0]
        # The newest directory is the last save reported, or the next one if it got renamed into
        # place just before the kill; either way it is whole.
        assert newest_step in (last_saved, last_saved + 1)
        state, extra = load_checkpoint(newest)
        assert extra == {"step": newest_step} and bool((state["model"]["w7"] == float(newest_step)).all())
        last_saved = newest_step
    latest = load_latest(root)
    assert latest is not None and latest[1] == last_saved
    print(f"{torn} of {KILLS} kills landed inside a save")
