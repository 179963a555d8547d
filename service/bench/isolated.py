"""Run one measurement in a fresh Python process, so its peak memory is its own.

Peak memory on CPU has no allocator counter to reset, and the process's peak resident set
(`ru_maxrss`) only ever grows. A configuration measured in a process of its own therefore
reports "peak RSS minus the RSS just before its first step" (`PeakMemory`), untouched by what
ran before it. On CUDA the allocator's own peak (`max_memory_allocated`) is used instead.

    run_isolated("service.bench.grpo_trial:run_trial", {"steps": 3, ...})  # -> the function's dict

The child is `python -m service.bench.isolated`; it reads {"target", "kwargs"} as JSON on stdin
and prints the target's JSON-able result on one line prefixed with RESULT_PREFIX.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

RESULT_PREFIX = "[bench-result] "
_REPO_ROOT = Path(__file__).resolve().parents[2]


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
            "method": "peak RSS delta in a fresh process (ru_maxrss - RSS before step 1)",
        }


def _resolve(target: str):
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"target must be 'package.module:function', got {target!r}")
    return getattr(importlib.import_module(module_name), attr)


def run_isolated(
    target: str, kwargs: dict[str, Any], timeout_s: float = 900.0, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """`target(**kwargs)` ('package.module:function') in a fresh interpreter; returns its dict.

    env: variables set in the child on top of this process's (read before torch loads, such as
    OpenMP's wait policy).
    """
    _resolve(target)  # a typo fails here, with a plain ImportError/AttributeError
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "service.bench.isolated"],
            input=json.dumps({"target": target, "kwargs": kwargs}),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise IsolatedRunError(f"{target} did not finish within {timeout_s:g}s") from exc
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX) and proc.returncode == 0:
            return json.loads(line[len(RESULT_PREFIX) :])
    tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
    raise IsolatedRunError(f"{target} failed (exit {proc.returncode}):\n{tail}")


def _child() -> None:
    spec = json.loads(sys.stdin.read())
    result = _resolve(spec["target"])(**spec["kwargs"])
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    _child()
