"""From what was seen of an execution (exit status, the reason it was stopped, OOM kills) to its status."""

from __future__ import annotations

import signal
import time

from rewards.sandbox.result import (
    FAILED,
    KILLED,
    MEMORY,
    OK,
    OUTPUT_LIMIT,
    SANDBOX_ERROR,
    TIMEOUT,
    SandboxLimits,
    SandboxResult,
)


def one_line(text: str, limit: int = 240) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def classify(rc: int, why: str | None, started: bool, oom: int, err: str, limits: SandboxLimits):
    """(status, exit_code, detail) from bwrap's exit status and what was seen on the way."""
    if why == OUTPUT_LIMIT:
        return OUTPUT_LIMIT, None, f"more than {limits.output_bytes} bytes on stdout or stderr: killed"
    if why == TIMEOUT:
        return TIMEOUT, None, f"still running after {limits.wall_s:g} s of wall clock: killed"
    if not started:
        return SANDBOX_ERROR, None, f"the sandbox did not start (exit {rc}): {one_line(err)}"
    if oom:
        return MEMORY, None, f"killed by the memory cgroup at {limits.memory_mb} MB"
    if rc > 128 or rc < 0:  # bwrap reports a signal as 128 + its number
        number = rc - 128 if rc > 128 else -rc
        name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
        if number == signal.SIGXCPU:
            return TIMEOUT, None, f"past its {limits.cpu_s:g} s of CPU time (SIGXCPU)"
        return KILLED, None, f"ended by {name}"
    if rc == 0:
        return OK, 0, ""
    last = one_line(err)
    if last.startswith("MemoryError"):
        return MEMORY, rc, f"MemoryError at the {limits.memory_mb} MB limit"
    return FAILED, rc, f"exit code {rc}" + (f": {last}" if last else "")


def error_result(started: float, detail: str) -> SandboxResult:
    return SandboxResult(SANDBOX_ERROR, None, "", "", time.monotonic() - started, one_line(detail))
