"""The thread that scores rewards in process: results and errors come back as from an executor, and
a reward stuck forever there does not keep the process from exiting (an executor's threads are
joined at exit, which hung a process whose inline reward had overrun its deadline)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import pytest

from actors.pool.placement import _InlineThread

REPO = Path(__file__).resolve().parents[3]

STUCK_THEN_EXIT = """
import threading
from concurrent.futures import TimeoutError
from actors.pool.placement import _InlineThread
job = _InlineThread().submit(threading.Event().wait)  # never returns
try:
    job.result(timeout=0.2)
except TimeoutError:
    print("left behind", flush=True)
"""


def test_results_and_errors_come_back_in_order():
    runner = _InlineThread()
    assert runner.submit(sum, [1, 2, 3]).result(timeout=10) == 6
    with pytest.raises(ZeroDivisionError):
        runner.submit(divmod, 1, 0).result(timeout=10)
    assert runner.submit(len, "abc").result(timeout=10) == 3


def test_shutdown_cancels_what_has_not_started():
    runner, gate = _InlineThread(), threading.Event()
    running = runner.submit(gate.wait)
    queued = runner.submit(len, "never")
    deadline = time.monotonic() + 10
    while not running.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    runner.shutdown()
    gate.set()
    assert running.result(timeout=10) is True
    assert queued.cancelled()
    with pytest.raises(FutureTimeout):
        runner.submit(len, "after").result(timeout=0.2)  # the thread has ended


def test_a_reward_stuck_forever_in_process_does_not_keep_the_process_alive():
    done = subprocess.run(
        [sys.executable, "-c", STUCK_THEN_EXIT], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "left behind"
