"""Run untrusted code once, in bubblewrap, its processes capped, and say what became of it.

Every outcome of the program is a status (`result.py`); only a caller's mistake (a file name that
leaves the work directory, limits of the wrong type) raises. A failure of the machinery itself is
`sandbox_error`, with the reason in `detail`.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import shutil
import subprocess
import sys
import threading
import time
import warnings

from rewards.sandbox import bwrap as cmd
from rewards.sandbox.outcome import classify, error_result
from rewards.sandbox.process_limit import Confinement, resolve
from rewards.sandbox.result import (
    OK,
    OUTPUT_LIMIT,
    SANDBOX_ERROR,
    TIMEOUT,
    SandboxLimits,
    SandboxResult,
)
from rewards.sandbox.seccomp import compiled_filter, seccomp_unavailable_reason

DEFAULT_LIMITS = SandboxLimits()
# At most one execution per core this process may use runs at a time: a worker's concurrent
# sandboxes (its threads', an event loop's) share the cores it was given, never more.
CORES = threading.BoundedSemaphore(len(os.sched_getaffinity(0)))
KILL_GRACE_S = 2.0  # after the sandbox's processes are killed, bubblewrap has this long to end by itself
_reason_lock = threading.Lock()
_reason: dict[str, str | None] = {}  # process_limit -> why no sandbox works (None: it does), once per process
_warm_works: list[bool] = []  # filled once per process by warm_sandboxes_work


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


def _input_fds(
    files: dict[str, str] | None, program: str | None, stdin: str, opened: list[int]
) -> tuple[dict[str, int], int | None, int]:
    """Memory files of the work files, the program and stdin (DEVNULL without one); every fd
    opened is appended to `opened` as it opens, so a failure half-way closes what was made."""

    def memfd(name: str, text: str) -> int:
        opened.append(cmd.memfd(name, text.encode()))
        return opened[-1]

    file_fds = {name: memfd("file", text) for name, text in (files or {}).items()}
    program_fd = memfd("program", program) if program is not None else None
    stdin_fd = memfd("stdin", stdin) if stdin else subprocess.DEVNULL
    return file_fds, program_fd, stdin_fd


def _wait_for(
    proc: subprocess.Popen, confinement: Confinement, started: float, limits: SandboxLimits
) -> tuple[bytes, bytes, str | None, int]:
    """The program's output and exit status; killed (all of the sandbox) at the deadline or past
    the output cap, which is then the reason returned."""
    out, err, why = _pump(proc, started + limits.wall_s, limits.output_bytes)
    if why is not None:
        confinement.kill()  # bubblewrap then ends by itself, its namespace emptied
    try:
        rc = proc.wait(
            timeout=max(0.05, started + limits.wall_s - time.monotonic()) + (KILL_GRACE_S if why else 0)
        )
    except subprocess.TimeoutExpired:
        why = TIMEOUT
        confinement.kill()
        try:
            rc = proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    return out, err, why, rc


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
    if not probe and (reason := sandbox_unavailable_reason(limits.process_limit)) is not None:
        return error_result(started, reason)
    for name in files or {}:
        cmd.check_file_name(name)
    method, reason = resolve(limits.process_limit)
    if method is None:
        return error_result(started, reason)
    fds: list[int] = []
    confinement: Confinement | None = None
    proc: subprocess.Popen | None = None
    try:
        # bwrap and its init run as root outside the slot's uid: 2 of the processes are theirs.
        confinement = Confinement(
            method, processes=limits.processes, memory_mb=limits.memory_mb, outside_processes=2
        )
        file_fds, program_fd, stdin_fd = _input_fds(files, program, stdin, fds)
        status_r, status_w = os.pipe()
        fds += [status_r, status_w]
        fds.append(cmd.memfd("seccomp", compiled_filter()))
        options = cmd.bwrap_options(
            limits=limits,
            python=python,
            status_fd=status_w,
            files=file_fds,
            program_fd=program_fd,
            seccomp_fd=fds[-1],
            slot_uid=confinement.slot_uid,
        )
        fds.append(cmd.options_fd(options))
        limited = [*cmd.prlimit_argv(limits, confinement.address_space_mb(limits.memory_mb)), "--", *command]
        argv = cmd.bwrap_argv(cmd.tool("bwrap"), fds[-1], limited, confinement.slot_uid)
        passed = [fd for fd in fds if fd not in (status_r, stdin_fd)]
        proc = subprocess.Popen(
            cmd.launcher_argv(confinement.procs_files, confinement.nproc, argv),
            stdin=stdin_fd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cmd.LAUNCHER_ENV,
            close_fds=True,
            pass_fds=passed,
        )
        for fd in [fd for fd in fds if fd != status_r]:  # the child holds its own copies now
            os.close(fd)
        fds = [status_r]
        out, err, why, rc = _wait_for(proc, confinement, started, limits)
        status, oom, stderr = _status_text(status_r), confinement.oom_kills(), err.decode("utf-8", "replace")
        code, exit_code, detail = classify(rc, why, '"child-pid"' in status, oom, stderr, limits)
        if not confinement.close(settled=proc.returncode is not None and proc.returncode >= 0):
            code, detail = SANDBOX_ERROR, "a process of the execution could not be removed from the host"
        confinement = None
        return SandboxResult(
            code,
            exit_code,
            out.decode("utf-8", "replace"),
            stderr,
            time.monotonic() - started,
            detail,
            method,
        )
    except OSError as exc:
        return error_result(started, f"{type(exc).__name__}: {exc}")
    finally:
        _release(proc, fds, confinement)


def _release(proc: subprocess.Popen | None, fds: list[int], confinement: Confinement | None) -> None:
    """Whatever an execution still holds when it ends, however it ends."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
    for stream in (proc.stdout, proc.stderr) if proc is not None else ():
        stream.close()
    for fd in fds:
        os.close(fd)
    if confinement is not None:
        confinement.close()


def _warm(request: dict, files: dict[str, str] | None, limits: SandboxLimits, python: str) -> SandboxResult:
    """A child of a warm sandbox; a fresh sandbox where warm ones do not work here (checked once)."""
    started = time.monotonic()
    if (reason := sandbox_unavailable_reason(limits.process_limit)) is not None:
        return error_result(started, reason)
    for name in files or {}:
        cmd.check_file_name(name)
    if not warm_sandboxes_work():
        program = request.get("source")
        command = [python, cmd.PROGRAM] if program is not None else request["argv"]
        return _execute(
            command, stdin=request["stdin"], files=files, limits=limits, program=program, python=python
        )
    from rewards.sandbox.warm import POOL

    return POOL.run({**request, "files": files or {}}, limits, python)


def warm_sandboxes_work() -> bool:
    """Whether a warm sandbox runs a trivial program here (checked once per process, after the
    fresh sandbox's probe). Where it does not (an old kernel without pidfd_open, a bubblewrap
    without --as-pid-1), every execution gets a fresh sandbox, with one warning."""
    with _reason_lock:
        if not _warm_works:
            from rewards.sandbox.warm import POOL  # reads the executor's source once, here

            probe = POOL.run(
                {"source": "print('ok')", "stdin": "", "files": {}},
                SandboxLimits(wall_s=10.0),
                sys.executable,
            )
            _warm_works.append(probe.status == OK and probe.stdout == "ok\n")
            if not _warm_works[0]:
                warnings.warn(
                    f"warm sandboxes do not work here ({probe.status}: {probe.detail}); every execution "
                    "starts a sandbox of its own (about 35 ms instead of a few)",
                    RuntimeWarning,
                    stacklevel=3,
                )
        return _warm_works[0]


def run_command(
    argv: list[str],
    *,
    stdin: str = "",
    files: dict[str, str] | None = None,
    limits: SandboxLimits | None = None,
    python: str | None = None,
    fresh: bool = False,
) -> SandboxResult:
    """Run `argv` in the sandbox, in a fresh work directory holding `files` (PATH: the interpreter's
    bin directory, /usr/local/bin, /usr/bin, /bin). `fresh=True`: a new bubblewrap sandbox for this
    execution alone instead of a child of a warm one."""
    if not argv:
        raise ValueError("run_command needs a command")
    limits, python = limits or DEFAULT_LIMITS, python or sys.executable
    with CORES:
        if not fresh:
            return _warm({"argv": list(argv), "stdin": stdin}, files, limits, python)
        return _execute(list(argv), stdin=stdin, files=files, limits=limits, program=None, python=python)


def run_python(
    source: str,
    *,
    stdin: str = "",
    files: dict[str, str] | None = None,
    limits: SandboxLimits | None = None,
    python: str | None = None,
    fresh: bool = False,
) -> SandboxResult:
    """Run `source` as a Python program (as `python /program/main.py`, cwd: the work directory holding
    `files`, which is also on sys.path) under `limits`; never raises for what the program does.

    By default a child forked by a warm sandbox of this process runs it (milliseconds: the
    interpreter is already up, `warm.py`); `fresh=True` starts a new interpreter in a new
    bubblewrap sandbox for it alone (tens of milliseconds; nothing of an earlier execution's
    interpreter state, such as modules it imported, can be there)."""
    limits, interpreter = limits or DEFAULT_LIMITS, python or sys.executable
    with CORES:
        if not fresh:
            return _warm({"source": source, "stdin": stdin}, files, limits, interpreter)
        return _execute(
            [interpreter, cmd.PROGRAM],
            stdin=stdin,
            files=files,
            limits=limits,
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
    fresh: bool = False,
) -> SandboxResult:
    """`run_python` in a worker thread, for event loops."""
    return await asyncio.to_thread(
        run_python, source, stdin=stdin, files=files, limits=limits, python=python, fresh=fresh
    )


def sandbox_unavailable_reason(process_limit: str = "auto") -> str | None:
    """None when bubblewrap, the seccomp filter and a way to cap processes (`process_limit`) work
    here (checked once per process and method by running `true` in a sandbox); otherwise one line
    saying what is missing."""
    with _reason_lock:
        if process_limit not in _reason:
            _reason[process_limit] = _probe(process_limit)
        return _reason[process_limit]


def process_limit_in_use(process_limit: str = "auto") -> str | None:
    """The method that caps processes here for `process_limit` (auto resolved), None where none does."""
    return resolve(process_limit)[0]


def _probe(process_limit: str) -> str | None:
    if shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    for tool in ("/usr/bin/prlimit", "/usr/bin/setpriv"):
        if not os.path.exists(tool):
            return f"{tool} is missing (apt-get install util-linux)"
    if (reason := seccomp_unavailable_reason()) is not None:
        return reason
    method, reason = resolve(process_limit)
    if method is None:
        return reason
    result = _execute(
        ["/usr/bin/true"],
        stdin="",
        files=None,
        limits=SandboxLimits(wall_s=10.0, process_limit=process_limit),
        program=None,
        python=sys.executable,
        probe=True,
    )
    if result.status != OK:
        return f"bubblewrap cannot start a sandbox here ({result.status}: {result.detail})"
    return None
