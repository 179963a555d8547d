"""Warm sandboxes: one bubblewrap sandbox kept running, forking a child per execution.

A fresh sandbox per execution costs an interpreter start and bwrap's set-up (~30 ms here). A warm
sandbox pays that once: `executor.py` runs inside it as the namespace's pid 1, a zygote that never
holds a program: for each execution it forks a child that reads the program itself, takes the
execution's rlimits, an emptied work directory, /tmp and /dev/shm, and writes its stdout and stderr
to two pipes this process reads (so output never passes through the executor either); afterwards
the executor kills everything else in the pid namespace and removes SysV IPC objects and POSIX
message queues. The sandbox itself is the same as a fresh one's (namespaces, read-only system,
emptied environment, seccomp filter, the slot's uid) and its processes are capped as a whole
(`process_limit.py`); the caps bind each execution since one runs at a time.

Whatever a program leaves or does, its execution gets its own status. When the executor ends
anyway (killed from outside, the OOM killer), or its clean-up did not finish, or it stops answering
(the host kills it past the deadline), the next execution starts a new sandbox. `WarmPool` keeps
idle sandboxes per (interpreter, limits that are fixed at start) for the threads of one process.
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
from rewards.sandbox.outcome import classify, error_result, one_line
from rewards.sandbox.process_limit import Confinement, resolve
from rewards.sandbox.result import KILLED, OUTPUT_LIMIT, TIMEOUT, SandboxLimits, SandboxResult
from rewards.sandbox.seccomp import compiled_filter

EXECUTOR = "/program/executor.py"
EXECUTOR_SOURCE = (Path(__file__).parent / "executor.py").read_text()
EXECUTOR_MB = 48  # the executor's own memory, added to the cgroup's limit so the program keeps its share
START_TIMEOUT_S = 15.0
ANSWER_GRACE_S = 2.0
CLOSE_GRACE_S = 1.0  # past the execution's deadline, the executor has this long to answer
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
    process_limit: str = "auto"

    @classmethod
    def of(cls, python: str, limits: SandboxLimits) -> WarmKey:
        return cls(python, limits.processes, limits.memory_mb, limits.disk_mb, limits.process_limit)


class WarmSandbox:
    """One running sandbox with its executor; `run` one execution at a time."""

    def __init__(self, key: WarmKey) -> None:
        self.key = key
        self.executions = 0
        method, reason = resolve(key.process_limit)
        if method is None:
            raise SandboxStartError(reason)
        self.method = method
        limits = SandboxLimits(processes=key.processes, memory_mb=key.memory_mb, disk_mb=key.disk_mb)
        # bwrap (root) and the executor hold 2 of the processes, as bwrap and its init do in a
        # fresh sandbox: the program gets the same number of its own.
        self.confinement = Confinement(
            method, processes=key.processes, memory_mb=key.memory_mb + EXECUTOR_MB, outside_processes=1
        )
        self.address_space = self.confinement.address_space_mb(key.memory_mb) << 20
        given: list[int] = []
        try:
            self.out_r, out_w = os.pipe()
            self.err_r, err_w = os.pipe()
            given += [out_w, err_w]
            for fd in (self.out_r, self.err_r):
                os.set_blocking(fd, False)
            given.append(cmd.memfd("executor", EXECUTOR_SOURCE.encode()))
            given.append(cmd.memfd("seccomp", compiled_filter()))
            options = cmd.bwrap_options(
                limits=limits,
                python=key.python,
                status_fd=None,
                files={},
                program_fd=given[2],
                seccomp_fd=given[3],
                program_path=EXECUTOR,
                die_with_parent=False,  # it ends when this process's end closes its control pipe
                as_pid_1=True,  # the program cannot kill the executor; the namespace dies with it
                slot_uid=self.confinement.slot_uid,
            )
            given.append(cmd.options_fd(options))
            command = [key.python, EXECUTOR, str(out_w), str(err_w)]
            argv = cmd.bwrap_argv(cmd.tool("bwrap"), given[4], command, self.confinement.slot_uid)
            self.proc = subprocess.Popen(
                cmd.launcher_argv(self.confinement.procs_files, self.confinement.nproc, argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=cmd.LAUNCHER_ENV,
                close_fds=True,
                pass_fds=given,
            )
        except BaseException:
            self.confinement.close()
            raise
        finally:
            for fd in given:
                os.close(fd)
        os.set_blocking(self.proc.stdin.fileno(), False)
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
        body = json.dumps(request).encode()
        header = {
            "wall_s": limits.wall_s,
            "cpu_s": cmd.cpu_seconds(limits),
            "address_space": self.address_space,
            "file_size": limits.file_size_mb << 20,
            "open_files": limits.open_files,
            "body": len(body),
        }
        ooms = self.confinement.oom_kills()
        self.executions += 1
        output = Output(self.out_r, self.err_r, limits.output_bytes)
        deadline = started + limits.wall_s + ANSWER_GRACE_S
        try:
            if not self._write(frame(header) + body, deadline, output):
                return self._result(
                    TIMEOUT, None, output, started, "the sandbox did not take the program in time"
                )
        except OSError as exc:
            return error_result(started, f"the warm sandbox is gone: {exc}"), False
        answer = self._answer(deadline, output)
        output.drain()
        if answer == "late":
            return self._result(TIMEOUT, None, output, started, "the sandbox did not answer in time: killed")
        if not isinstance(answer, dict):
            detail = "the sandbox's executor ended during the execution (killed from outside)"
            return self._result(KILLED, None, output, started, detail)
        sig = answer.get("signal")
        rc = -sig if sig else answer["exit"]
        why = OUTPUT_LIMIT if output.over else (TIMEOUT if answer["why"] == TIMEOUT else None)
        oom = self.confinement.oom_kills() - ooms
        code, exit_code, detail = classify(rc, why, True, oom, output.text(1), limits)
        result = SandboxResult(
            code, exit_code, output.text(0), output.text(1), time.monotonic() - started, detail, self.method
        )
        return result, bool(answer["clean"] and answer["read"])

    def _result(
        self, status: str, exit_code: int | None, output: Output, started: float, detail: str
    ) -> tuple[SandboxResult, bool]:
        elapsed = time.monotonic() - started
        result = SandboxResult(
            status, exit_code, output.text(0), output.text(1), elapsed, detail, self.method
        )
        return result, False

    def _write(self, data: bytes, deadline: float, output: Output) -> bool:
        """Send `data` on the control pipe (the child reads the body as it goes); False past the deadline."""
        fd = self.proc.stdin.fileno()
        view = memoryview(data)
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_WRITE)
            while view:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    return False
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    continue
        return True

    def _answer(self, deadline: float, output: Output | None = None) -> dict | str | None:
        """The next answer, reading the program's output meanwhile (and asking the executor to stop
        the program once it is past the cap); "late" past the deadline; None when the executor is gone."""
        fd = self.proc.stdout.fileno()
        received = bytearray()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            for stream in output.fds if output is not None else ():
                selector.register(stream, selectors.EVENT_READ)
            while True:
                whole = complete_frame(received)
                if whole is not None:
                    return json.loads(whole)
                left = deadline - time.monotonic()
                if left <= 0:
                    return "late"
                for key, _ in selector.select(left):
                    if key.fd != fd:
                        if not output.read(key.fd):
                            selector.unregister(key.fd)
                        if output.over and not output.stop_sent:
                            output.stop_sent = self._write(frame({"stop": True}), deadline, output)
                        continue
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        return None
                    received += chunk

    def _stderr_line(self) -> str:
        if self.proc.poll() is None:
            return ""
        return one_line(self.proc.stderr.read().decode("utf-8", "replace"))

    def close(self) -> None:
        """End the sandbox and everything in it, free its cgroup and its uid slot. The executor ends
        when its control pipe closes; bubblewrap then ends once the namespace is empty. One that does
        not within CLOSE_GRACE_S is killed with all of the sandbox."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            self.confinement.kill()
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()
        for fd in (self.out_r, self.err_r):
            os.close(fd)
        self.confinement.close(settled=self.proc.returncode >= 0)


def frame(obj: dict) -> bytes:
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


def complete_frame(received: bytearray) -> bytes | None:
    if len(received) < 4:
        return None
    size = struct.unpack(">I", received[:4])[0]
    return bytes(received[4 : 4 + size]) if len(received) >= 4 + size else None


class Output:
    """The program's stdout and stderr, read from the sandbox's two pipes up to `cap` bytes each."""

    def __init__(self, out_r: int, err_r: int, cap: int) -> None:
        self.fds = (out_r, err_r)
        self.cap = cap
        self.bufs = (bytearray(), bytearray())
        self.over = False
        self.stop_sent = False

    def read(self, fd: int) -> bool:
        """Read what is there; False once the pipe has no writer left."""
        buf = self.bufs[self.fds.index(fd)]
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return False
                if len(buf) <= self.cap:
                    buf += chunk
                self.over = self.over or len(buf) > self.cap
        except BlockingIOError:
            return True

    def drain(self) -> None:
        """What the execution wrote last: its every process is gone, so nothing more comes."""
        for fd in self.fds:
            self.read(fd)

    def text(self, index: int) -> str:
        return bytes(self.bufs[index][: self.cap]).decode("utf-8", "replace")


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
