"""Run one measurement in a fresh Python process, so its peak memory is its own.

Peak memory on CPU has no allocator counter to reset, and the process's peak resident set
(`ru_maxrss`) only ever grows. A configuration measured in a process of its own therefore
reports "peak RSS minus the RSS just before its first step" (`PeakMemory`), untouched by what
ran before it. On CUDA the allocator's own peak (`max_memory_allocated`) is used instead.

    run_isolated("bench.grpo_trial:run_trial", {"steps": 3, ...})  # -> the function's dict

On a machine without CUDA the process is forked from a server that has already imported torch
(`bench.forkserver`, one per environment), which saves each trial those seconds of imports;
otherwise, or where forking is not safe, the child is `python -m bench.isolated`, which
reads {"target", "kwargs"} as JSON on stdin. Either prints the target's JSON-able result on one
line prefixed with RESULT_PREFIX. BENCH_FORKSERVER=0 turns the servers off.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from bench.forkserver import ForkServer
from bench.trial_target import RESULT_PREFIX, resolve_target

_REPO_ROOT = Path(__file__).resolve().parents[1]


class IsolatedRunError(RuntimeError):
    """The child process failed; the message carries the end of its stderr."""


def rss_mb() -> float:
    """Current resident set size of this process in MiB (Linux /proc; 0 where unavailable)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PeakMemory:
    """Peak memory of the work after construction, with the method used to measure it."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.baseline_mb = torch.cuda.memory_allocated(self.device) / 2**20
        else:
            self.baseline_mb = rss_mb()

    def result(self) -> dict[str, Any]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device) / 2**20
            return {"peak_mb": round(peak, 1), "method": "CUDA max_memory_allocated (weights included)"}
        delta = max(0.0, peak_rss_mb() - self.baseline_mb)
        return {
            "peak_mb": round(delta, 1),
            "method": "peak RSS delta in a process of its own (ru_maxrss - RSS before step 1)",
        }


_SERVERS: dict[tuple[tuple[str, str], ...], ForkServer] = {}


def _fork_server(env: dict[str, str] | None) -> ForkServer | None:
    """The fork server for `env`, started on first use; None where servers are off or unsafe."""
    if os.environ.get("BENCH_FORKSERVER", "1") == "0" or not hasattr(os, "fork") or torch.cuda.is_available():
        return None  # a CUDA context does not survive fork: GPU trials start fresh interpreters
    key = tuple(sorted((env or {}).items()))
    if key not in _SERVERS:
        _SERVERS[key] = ForkServer(env or {}, _REPO_ROOT)
    return _SERVERS[key]


@atexit.register
def close_fork_servers() -> None:
    for server in _SERVERS.values():
        server.close()
    _SERVERS.clear()


def _result(target: str, rc: int | None, stdout: str, stderr: str, timeout_s: float) -> dict[str, Any]:
    if rc is None:
        raise IsolatedRunError(f"{target} did not finish within {timeout_s:g}s")
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX) and rc == 0:
            return json.loads(line[len(RESULT_PREFIX) :])
    tail = "\n".join(stderr.strip().splitlines()[-15:])
    raise IsolatedRunError(f"{target} failed (exit {rc}):\n{tail}")


def run_isolated(
    target: str, kwargs: dict[str, Any], timeout_s: float = 900.0, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """`target(**kwargs)` ('package.module:function') in a process of its own; returns its dict.

    env: variables set in the child on top of this process's (read before torch loads, such as
    OpenMP's wait policy).
    """
    resolve_target(target)  # a typo fails here, with a plain ImportError/AttributeError
    server = _fork_server(env)
    answer = server.run(target, kwargs, timeout_s) if server is not None else None
    if answer is not None:
        return _result(target, answer["rc"], answer["stdout"], answer["stderr"], timeout_s)
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.isolated"],
            input=json.dumps({"target": target, "kwargs": kwargs}),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return _result(target, None, "", "", timeout_s)
    return _result(target, proc.returncode, proc.stdout, proc.stderr, timeout_s)


def _child() -> None:
    spec = json.loads(sys.stdin.read())
    result = resolve_target(spec["target"])(**spec["kwargs"])
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    _child()
