"""Warm sandboxes: one bubblewrap sandbox kept running, forking a child per execution.

A fresh sandbox per execution costs an interpreter start and bwrap's set-up (~30 ms here). A warm
sandbox pays that once: `executor.py` runs inside it and forks a child for each program, with the
execution's rlimits, fresh stdio and an emptied work directory, /tmp and /dev/shm; after the child
it kills everything else in the sandbox's pid namespace and removes SysV IPC objects. The sandbox
itself is the same as a fresh one's (namespaces, read-only system, emptied environment) and sits
in its own pids and memory cgroups, whose caps bind each execution since one runs at a time.

The executor is the namespace's pid 1, so nothing inside can signal it, and everything inside dies
with it. When it ends anyway (killed from outside, the OOM killer), or its clean-up did not finish,
or it stops answering (the host kills it past the deadline), that execution gets its status and the
next one starts a new sandbox. `WarmPool` keeps idle sandboxes per
(interpreter, limits that are fixed at start) for the threads of one process.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rewards.sandbox import bwrap as cmd
from rewards.sandbox.cgroup import ExecutionCgroups
from rewards.sandbox.outcome import classify, error_result, one_line
from rewards.sandbox.result import KILLED, OUTPUT_LIMIT, SANDBOX_ERROR, TIMEOUT, SandboxLimits, SandboxResult

EXECUTOR = "/program/executor.py"
EXECUTOR_SOURCE = (Path(__file__).parent / "executor.py").read_text()
EXECUTOR_MB = 48  # the executor's own memory, added to the cgroup's limit so the program keeps its share
START_TIMEOUT_S = 15.0
ANSWER_GRACE_S = 2.0  # past the execution's deadline, the executor has this long to answer
IDLE_PER_KEY = 8


class SandboxStartError(RuntimeError):
    """The warm sandbox did not come up (the reason is one line)."""


@dataclass(frozen=True)
class WarmKey:
    """What a warm sandbox fixes when it starts: other limits are set per execution."""

    python: str
    processes: int
    memory_mb: int
    disk_mb: int

    @classmethod
    def of(cls, python: str, limits: SandboxLimits) -> WarmKey:
        return cls(python, limits.processes, limits.memory_mb, limits.disk_mb)


class WarmSandbox:
    """One running sandbox with its executor; `run` one execution at a time."""

    def __init__(self, key: WarmKey) -> None:
        self.key = key
        self.executions = 0
        limits = SandboxLimits(processes=key.processes, memory_mb=key.memory_mb, disk_mb=key.disk_mb)
        # bwrap and the executor hold 2 pids, as bwrap and its init do in a fresh sandbox: the
        # program gets the same number of its own.
        self.cgroups = ExecutionCgroups(processes=key.processes, memory_mb=key.memory_mb + EXECUTOR_MB)
        self.address_space = self.cgroups.address_space_mb(key.memory_mb) << 20
        fd = cmd.memfd("executor", EXECUTOR_SOURCE.encode())
        try:
            argv = cmd.bwrap_argv(
                cmd.tool("bwrap"),
                [key.python, EXECUTOR],
                limits=limits,
                python=key.python,
                status_fd=None,
                files={},
                program_fd=fd,
                address_space_mb=None,
                program_path=EXECUTOR,
                die_with_parent=False,  # it ends when this process's end closes its control pipe
                as_pid_1=True,  # the program cannot kill the executor; the namespace dies with it
            )
            self.proc = subprocess.Popen(
                cmd.launcher_argv(self.cgroups.procs_files, argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=cmd.LAUNCHER_ENV,
                close_fds=True,
                pass_fds=[fd],
            )
        except BaseException:
            self.cgroups.close()
            raise
        finally:
            os.close(fd)
        ready = self._answer(time.monotonic() + START_TIMEOUT_S)
        if not (isinstance(ready, dict) and ready.get("ready")):
            why = self._stderr_line() or "no answer"
            self.close()
            raise SandboxStartError(f"the warm sandbox did not start: {why}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, request: dict, limits: SandboxLimits) -> tuple[SandboxResult, bool]:
        """One execution; (its result, whether this sandbox can run the next one)."""
        started = time.monotonic()
        request = {
            **request,
            "wall_s": limits.wall_s,
            "cpu_s": cmd.cpu_seconds(limits),
            "address_space": self.address_space,
            "file_size": limits.file_size_mb << 20,
            "open_files": limits.open_files,
            "output_bytes": limits.output_bytes,
        }
        ooms = self.cgroups.oom_kills()
        self.executions += 1
        try:
            self._send(request)
        except OSError as exc:
            return error_result(started, f"the warm sandbox is gone: {exc}"), False
        answer = self._answer(started + limits.wall_s + ANSWER_GRACE_S)
        elapsed = time.monotonic() - started
        if answer == "late":
            return SandboxResult(
                TIMEOUT, None, "", "", elapsed, "the sandbox did not answer in time: killed"
            ), False
        if not isinstance(answer, dict):
            detail = "the sandbox's executor ended during the execution (killed from outside)"
            return SandboxResult(KILLED, None, "", "", elapsed, detail), False
        sig = answer.get("signal")
        rc = -sig if sig else answer["exit"]
        why = answer["why"] if answer["why"] in (OUTPUT_LIMIT, TIMEOUT) else None
        oom = self.cgroups.oom_kills() - ooms
        code, exit_code, detail = classify(rc, why, True, oom, answer["stderr"], limits)
        if not answer["clean"]:
            code, detail = (
                SANDBOX_ERROR,
                "the sandbox could not be emptied after the program: it was replaced",
            )
        result = SandboxResult(code, exit_code, answer["stdout"], answer["stderr"], elapsed, detail)
        return result, bool(answer["clean"])

    def _send(self, obj: dict) -> None:
        body = json.dumps(obj).encode()
        self.proc.stdin.write(struct.pack(">I", len(body)) + body)
        self.proc.stdin.flush()

    def _answer(self, deadline: float) -> dict | str | None:
        """The next answer; "late" past the deadline; None when the executor is gone."""
        header = self._read(4, deadline)
        if not isinstance(header, bytes):
            return header
        body = self._read(struct.unpack(">I", header)[0], deadline)
        return json.loads(body) if isinstance(body, bytes) else body

    def _read(self, n: int, deadline: float) -> bytes | str | None:
        fd = self.proc.stdout.fileno()
        chunks: list[bytes] = []
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while n:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    return "late"
                chunk = os.read(fd, n)
                if not chunk:
                    return None
                chunks.append(chunk)
                n -= len(chunk)
        return b"".join(chunks)

    def _stderr_line(self) -> str:
        if self.proc.poll() is None:
            return ""
        return one_line(self.proc.stderr.read().decode("utf-8", "replace"))

    def close(self) -> None:
        """Kill the sandbox and everything in it, and remove its cgroups."""
        self.cgroups.kill()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        self.cgroups.close()


class WarmPool:
    """Idle warm sandboxes per key; a thread takes one (or starts one) for each execution."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[WarmKey, list[WarmSandbox]] = {}

    def run(self, request: dict, limits: SandboxLimits, python: str) -> SandboxResult:
        started = time.monotonic()
        key = WarmKey.of(python, limits)
        sandbox = self._take(key)
        if sandbox is None:
            try:
                sandbox = WarmSandbox(key)
            except (OSError, SandboxStartError) as exc:
                return error_result(started, str(exc))
        try:
            result, reusable = sandbox.run(request, limits)
        except BaseException:
            sandbox.close()
            raise
        if reusable and sandbox.alive():
            self._give_back(sandbox)
        else:
            sandbox.close()
        return result

    def _take(self, key: WarmKey) -> WarmSandbox | None:
        with self._lock:
            idle = self._idle.get(key, [])
            while idle:
                sandbox = idle.pop()
                if sandbox.alive():
                    return sandbox
                sandbox.close()
        return None

    def _give_back(self, sandbox: WarmSandbox) -> None:
        with self._lock:
            idle = self._idle.setdefault(sandbox.key, [])
            if len(idle) < IDLE_PER_KEY:
                idle.append(sandbox)
                return
        sandbox.close()

    def close(self) -> None:
        """Close every idle sandbox (the pool stays usable: the next execution starts a new one)."""
        with self._lock:
            idle = [s for sandboxes in self._idle.values() for s in sandboxes]
            self._idle.clear()
        for sandbox in idle:
            sandbox.close()

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._idle.values())


POOL = WarmPool()
atexit.register(POOL.close)
