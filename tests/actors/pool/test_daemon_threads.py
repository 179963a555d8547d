"""The daemon threads that run reward calls in process (inline scoring) and a worker's threaded
rewards: results and errors come back as from an executor, and a reward stuck forever there does
not keep the process from exiting (an executor's threads are joined at exit, which hung a process
whose inline reward had overrun its deadline)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from actors.pool.daemon_threads import DaemonThreads

REPO = Path(__file__).resolve().parents[3]

STUCK_THEN_EXIT = """
import threading
from concurrent.futures import TimeoutError
from actors.pool.daemon_threads import DaemonThreads
threads = DaemonThreads({threads}, "test")
jobs = [threads.submit(threading.Event().wait) for _ in range({threads})]  # never return
try:
    jobs[-1].result(timeout=0.2)
except TimeoutError:
    print("left behind", flush=True)
"""


def test_results_and_errors_come_back_in_order():
    runner = DaemonThreads(1, "test")
    assert runner.submit(sum, [1, 2, 3]).result(timeout=10) == 6
    with pytest.raises(ZeroDivisionError):
        runner.submit(divmod, 1, 0).result(timeout=10)
    assert runner.submit(int, "ff", base=16).result(timeout=10) == 255
    runner.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        runner.submit(len, "late")


def test_shutdown_cancels_what_has_not_started():
    runner, gate = DaemonThreads(1, "test"), threading.Event()
    running = runner.submit(gate.wait)
    queued = runner.submit(len, "never")
    deadline = time.monotonic() + 10
    while not running.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    runner.shutdown()
    gate.set()
    assert running.result(timeout=10) is True
    assert queued.cancelled()


def test_several_threads_run_calls_at_once_and_serve_asyncio():
    runner, both = DaemonThreads(2, "test"), threading.Barrier(2, timeout=10)
    # each call waits for the other: only two threads running at once can finish them
    first, second = runner.submit(both.wait), runner.submit(both.wait)
    assert sorted([first.result(timeout=10), second.result(timeout=10)]) == [0, 1]

    async def call() -> int:
        return await asyncio.get_running_loop().run_in_executor(runner, len, "abcd")

    assert asyncio.run(call()) == 4
    runner.shutdown()


@pytest.mark.parametrize("threads", [1, 3])
def test_a_reward_stuck_forever_does_not_keep_the_process_alive(threads):
    done = subprocess.run(
        [sys.executable, "-c", STUCK_THEN_EXIT.format(threads=threads)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "left behind"


WAITING_STUCK_THEN_EXIT = """
import sys
sys.path.insert(0, "tests/actors")
from actors.pool.waiting import WaitingRunner
from rewards import RewardConfig, FenScorer
from rewards.config import UserRewardSpec
spec = UserRewardSpec(fn="user_rewards:sleeps_forever_on_marker", threads=True)
runner = WaitingRunner(concurrency=2, item_timeout_s=0.3)
fen = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
results = runner.score(FenScorer(RewardConfig(user=[spec])), ["HANG", fen], [fen, fen], None)
print(*(r.status for r in results), flush=True)
runner.close()
"""


def test_a_worker_whose_threaded_reward_never_returns_still_exits():
    """A reward worker's runner for rewards that ask for threads: the stuck item gets status
    timeout, the other is scored, and the process exits although the call never returns."""
    done = subprocess.run(
        [sys.executable, "-c", WAITING_STUCK_THEN_EXIT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["timeout", "ok"], done.stdout
