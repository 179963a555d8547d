"""Run untrusted code once, in bubblewrap, inside its own cgroups, and say what became of it.

Every outcome of the program is a status (`result.py`); only a caller's mistake (a file name that
leaves the work directory, limits of the wrong type) raises. A failure of the machinery itself is
`sandbox_error`, with the reason in `detail`.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time

from rewards.sandbox import bwrap as cmd
from rewards.sandbox.cgroup import ExecutionCgroups
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

DEFAULT_LIMITS = SandboxLimits()
_reason_lock = threading.Lock()
_reason: list[str | None] = []  # filled once per process by the probe


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name)  # close-on-exec: only pass_fds reach the launcher
    _write_all(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _one_line(text: str, limit: int = 240) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _pump(proc: subprocess.Popen, deadline: float, cap: int) -> tuple[bytes, bytes, str | None]:
    """Read stdout and stderr until both close; stop early at the deadline or past the cap."""
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    with selectors.DefaultSelector() as selector:
        for fd in bufs:
            selector.register(fd, selectors.EVENT_READ)
        why = None
        while selector.get_map() and why is None:
            left = deadline - time.monotonic()
            if left <= 0:
                why = TIMEOUT
                break
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                bufs[key.fd] += chunk
                if len(bufs[key.fd]) > cap:
                    why = OUTPUT_LIMIT
    out, err = bufs.values()
    return bytes(out[:cap]), bytes(err[:cap]), why


def _status_text(fd: int) -> str:
    os.set_blocking(fd, False)
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    return b"".join(chunks).decode("utf-8", "replace")


def _classify(rc: int, why: str | None, started: bool, oom: int, err: str, limits: SandboxLimits):
    """(status, exit_code, detail) from bwrap's exit status and what was seen on the way."""
    if why == OUTPUT_LIMIT:
        return OUTPUT_LIMIT, None, f"more than {limits.output_bytes} bytes on stdout or stderr: killed"
    if why == TIMEOUT:
        return TIMEOUT, None, f"still running after {limits.wall_s:g} s of wall clock: killed"
    if not started:
        return SANDBOX_ERROR, None, f"the sandbox did not start (exit {rc}): {_one_line(err)}"
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
    last = _one_line(err)
    if last.startswith("MemoryError"):
        return MEMORY, rc, f"MemoryError at the {limits.memory_mb} MB limit"
    return FAILED, rc, f"exit code {rc}" + (f": {last}" if last else "")


def _error(started: float, detail: str) -> SandboxResult:
    return SandboxResult(SANDBOX_ERROR, None, "", "", time.monotonic() - started, _one_line(detail))


def _execute(
    command: list[str],
    *,
    stdin: str,
    files: dict[str, str] | None,
    limits: SandboxLimits,
    program: str | None,
    python: str,
    probe: bool = False,
) -> SandboxResult:
    started = time.monotonic()
    if not probe and (reason := sandbox_unavailable_reason()) is not None:
        return _error(started, reason)
    for name in files or {}:
        cmd.check_file_name(name)
    fds: list[int] = []
    cgroups: ExecutionCgroups | None = None
    proc: subprocess.Popen | None = None
    try:
        cgroups = ExecutionCgroups(processes=limits.processes, memory_mb=limits.memory_mb)
        file_fds = {name: _memfd("file", text.encode()) for name, text in (files or {}).items()}
        fds += file_fds.values()
        program_fd = _memfd("program", program.encode()) if program is not None else None
        if program_fd is not None:
            fds.append(program_fd)
        stdin_fd = _memfd("stdin", stdin.encode()) if stdin else subprocess.DEVNULL
        if stdin:
            fds.append(stdin_fd)
        status_r, status_w = os.pipe()
        fds += [status_r, status_w]
        address_space = limits.memory_mb * 4 if cgroups.memory is not None else limits.memory_mb
        argv = cmd.bwrap_argv(
            _tool("bwrap"),
            command,
            limits=limits,
            python=python,
            status_fd=status_w,
            files=file_fds,
            program_fd=program_fd,
            address_space_mb=address_space,
        )
        procs = cgroups.procs_files
        proc = subprocess.Popen(
            ["/bin/sh", "-c", cmd.LAUNCH, "launch", str(len(procs)), *procs, *argv],
            stdin=stdin_fd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cmd.LAUNCHER_ENV,
            close_fds=True,
            pass_fds=[status_w, *file_fds.values(), *([program_fd] if program_fd is not None else [])],
        )
        for fd in [fd for fd in fds if fd != status_r]:
            os.close(fd)
        fds = [status_r]
        out, err, why = _pump(proc, started + limits.wall_s, limits.output_bytes)
        if why is not None:
            cgroups.kill()
            proc.kill()
        try:
            rc = proc.wait(timeout=max(0.05, started + limits.wall_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            why = TIMEOUT
            cgroups.kill()
            proc.kill()
            rc = proc.wait()
        status = _status_text(status_r)
        oom = cgroups.oom_kills()
        stderr = err.decode("utf-8", "replace")
        code, exit_code, detail = _classify(rc, why, '"child-pid"' in status, oom, stderr, limits)
        if not cgroups.close():
            code, detail = SANDBOX_ERROR, "a process of the execution could not be removed from its cgroup"
        cgroups = None
        return SandboxResult(
            code, exit_code, out.decode("utf-8", "replace"), stderr, time.monotonic() - started, detail
        )
    except OSError as exc:
        return _error(started, f"{type(exc).__name__}: {exc}")
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr) if proc is not None else ():
            stream.close()
        for fd in fds:
            os.close(fd)
        if cgroups is not None:
            cgroups.close()


def _tool(name: str) -> str:
    return shutil.which(name, path="/usr/bin:/bin:/usr/local/bin") or name


def run_command(
    argv: list[str],
    *,
    stdin: str = "",
    files: dict[str, str] | None = None,
    limits: SandboxLimits | None = None,
    python: str | None = None,
) -> SandboxResult:
    """Run `argv` in the sandbox, in a fresh work directory holding `files` (PATH: the interpreter's
    bin directory, /usr/local/bin, /usr/bin, /bin)."""
    if not argv:
        raise ValueError("run_command needs a command")
    return _execute(
        list(argv),
        stdin=stdin,
        files=files,
        limits=limits or DEFAULT_LIMITS,
        program=None,
        python=python or sys.executable,
    )


def run_python(
    source: str,
    *,
    stdin: str = "",
    files: dict[str, str] | None = None,
    limits: SandboxLimits | None = None,
    python: str | None = None,
) -> SandboxResult:
    """Run `source` as a Python program (`python /program/main.py`, cwd: the work directory holding
    `files`, which is also on sys.path) under `limits`; never raises for what the program does."""
    interpreter = python or sys.executable
    return _execute(
        [interpreter, cmd.PROGRAM],
        stdin=stdin,
        files=files,
        limits=limits or DEFAULT_LIMITS,
        program=source,
        python=interpreter,
    )


async def run_python_async(
    source: str,
    *,
    stdin: str = "",
    files: dict[str, str] | None = None,
    limits: SandboxLimits | None = None,
    python: str | None = None,
) -> SandboxResult:
    """`run_python` in a worker thread, for event loops."""
    return await asyncio.to_thread(run_python, source, stdin=stdin, files=files, limits=limits, python=python)


def sandbox_unavailable_reason() -> str | None:
    """None when bubblewrap and the pids cgroup work here (checked once per process by running
    `true` in a sandbox); otherwise one line saying what is missing."""
    with _reason_lock:
        if not _reason:
            _reason.append(_probe())
        return _reason[0]


def _probe() -> str | None:
    if shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if not os.path.exists("/usr/bin/prlimit"):
        return "/usr/bin/prlimit is missing (apt-get install util-linux)"
    if not os.access("/sys/fs/cgroup/pids", os.W_OK):
        return "no writable cgroup v1 pids controller at /sys/fs/cgroup/pids (needed to cap processes)"
    result = _execute(
        ["/usr/bin/true"],
        stdin="",
        files=None,
        limits=SandboxLimits(wall_s=10.0),
        program=None,
        python=sys.executable,
        probe=True,
    )
    if result.status != OK:
        return f"bubblewrap cannot start a sandbox here ({result.status}: {result.detail})"
    return None
