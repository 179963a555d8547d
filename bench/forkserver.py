"""Fresh processes for benchmark trials without paying for torch's imports each time.

A trial runs in a process of its own so that its peak memory is its own (`bench.isolated`).
Starting Python, importing torch and, at the first optimiser, `torch._dynamo` (torch.optim imports
it lazily) takes seconds on a small machine, more than many trials take to run. A fork server is one
process per environment (OpenMP reads its wait policy when torch loads, so the environment is
fixed per server) that imports all of that once and forks a child for each trial: the child
starts with everything imported and with nothing else of its parent's, runs the trial, and exits.

Forking is safe only while the server has never entered an OpenMP parallel region: GNU OpenMP
keeps its thread pool across fork, and a child of a process that has one hangs at its first
parallel region. The server runs no torch work itself, and before each fork it checks that it has
no more threads than right after importing torch; if it has, the trial runs in a fresh
interpreter instead (`bench.isolated`), as it would without the server.

Protocol (one JSON object per line): the client writes {"target", "kwargs", "timeout_s"}; the
server answers {"rc", "stdout", "stderr"} with the child's exit code and the ends of its output
(rc is null when the child was killed for running past timeout_s, or when it could not fork).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import IO, Any

from bench.trial_target import RESULT_PREFIX, resolve_target

FORK_UNSAFE = "fork-unsafe"  # the server's answer when it has threads it did not start with
_OUTPUT_TAIL = 20_000  # characters of a child's stdout and stderr sent back


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1  # unknown: never fork


def _tail(f: IO[bytes]) -> str:
    f.seek(0)
    return f.read().decode(errors="replace")[-_OUTPUT_TAIL:]


def _child(target: str, kwargs: dict[str, Any], out: IO[bytes], err: IO[bytes]) -> None:
    """In the forked child: run the target, write its result line, exit (never returns)."""
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    code = 0
    try:
        result = resolve_target(target)(**kwargs)
        sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    except BaseException:  # noqa: BLE001 - the child reports every failure as its exit code
        traceback.print_exc()
        code = 1
    finally:
        try:
            if "ray" in sys.modules and sys.modules["ray"].is_initialized():
                sys.modules["ray"].shutdown()  # what interpreter exit would do; os._exit skips it
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def _wait(pid: int, timeout_s: float) -> int | None:
    """The child's exit code, or None after killing it at timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)


def serve(requests: IO[str], answers: IO[str]) -> None:
    """The server's loop: one forked child per request line, until end of input."""
    import torch  # noqa: F401 - imported once here, inherited by every child
    import torch._dynamo  # noqa: F401 - torch.optim would import it in every trial

    threads_at_start = _threads()
    for line in requests:
        request = json.loads(line)
        resolve_target(request["target"])  # its module, imported once before forking
        if threads_at_start < 0 or _threads() > threads_at_start:
            answers.write(json.dumps({"rc": None, "stdout": "", "stderr": FORK_UNSAFE}) + "\n")
            answers.flush()
            continue
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request["target"], request["kwargs"], out, err)
            rc = _wait(pid, float(request["timeout_s"]))
            answer = {"rc": rc, "stdout": _tail(out), "stderr": _tail(err)}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


class ForkServer:
    """A running server for one environment (`env`: variables on top of os.environ)."""

    def __init__(self, env: dict[str, str], repo_root: Path) -> None:
        full = {**os.environ, **env}
        full["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo_root), full.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=full,
        )

    def run(self, target: str, kwargs: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        """The child's {"rc", "stdout", "stderr"}; None when the server cannot fork safely or died."""
        if self.proc.poll() is not None:
            return None
        try:
            self.proc.stdin.write(
                json.dumps({"target": target, "kwargs": kwargs, "timeout_s": timeout_s}) + "\n"
            )
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            return None
        if not line:
            return None
        answer = json.loads(line)
        return None if answer["stderr"] == FORK_UNSAFE else answer

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)
