"""Environment instances held in a child process, so that a call past its deadline can be ended.

A step that never returns (a read that blocks, a lock never released, a regular expression that
backtracks for ever) cannot be ended from another thread of the process running it: a thread
cannot be killed, and one that holds the GIL or a lock the others need holds the whole process.
So a host with a step deadline keeps its environment's instances in a child of its process
(`EnvProcess`) and sends it every call (the constructor, setup, reset, step, episode_info, close,
the class's demonstration) with that deadline. A call not answered by then has its child killed
(SIGKILL to the child's process group: an engine the environment started goes too) and raises
`CallTimedOut`; the next call forks a fresh child. The instances the killed child held are gone:
a call on one raises `InstanceLost` (`rewards.env.episode.Episode` replays its episode there when
the environment is deterministic).

The child is forked from the host's process, so the class, the modules it imported and sys.path
are there already; it runs only the environment's code, in its own process group (a signal to the
host's group is the host's to handle), answers over a pipe, and exits when that pipe closes or its
parent is gone (a thread of its own looks every second; a child forked by the main thread also
gets SIGKILL from the kernel when the parent dies, in case its environment holds the GIL). Up to
`concurrent_steps` calls run in it at once, on threads, as they would in the host's process.
`InProcess` is the same interface run in the caller's own process, for hosts without a deadline.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import signal
import threading
import time
import warnings
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from rewards.env.process_child import (
    CALL,
    CLASS_CALL,
    DROP,
    HEADER,
    NEW,
    EnvCallError,
    read_message,
    serve,
    timed_call,
    write_all,
)

REPLY_SLACK_S = 0.25  # beyond the deadline, for the answer to cross the pipe on a loaded machine


class CallTimedOut(Exception):
    """The call did not answer within its deadline; the child that ran it was killed."""


class InstanceLost(Exception):
    """The instance lived in a child that is gone (killed at another call's deadline, or dead)."""


@dataclass(frozen=True)
class Instance:
    """An environment instance: its id and the generation of the child holding it."""

    id: int
    generation: int


class InProcess:
    """The environment's calls run in the calling process: a late call is known only once it
    returns (what a host without a step deadline uses)."""

    def __init__(self, env_cls: type) -> None:
        self.env_cls = env_cls
        self._instances: dict[int, Any] = {}
        self._ids = itertools.count()

    def new(self, deadline_s: float | None = None) -> tuple[Instance, float]:
        began = time.perf_counter()
        try:
            obj = self.env_cls()
        except Exception as exc:
            raise EnvCallError(type(exc).__name__, str(exc), time.perf_counter() - began) from exc
        instance = Instance(next(self._ids), 0)
        self._instances[instance.id] = obj
        return instance, time.perf_counter() - began

    def call(
        self, instance: Instance, method: str, args: tuple, deadline_s: float | None = None
    ) -> tuple[Any, float]:
        return timed_call(getattr(self._instances[instance.id], method), args)

    def class_call(self, method: str, args: tuple, deadline_s: float | None = None) -> tuple[Any, float]:
        return timed_call(getattr(self.env_cls, method), args)

    def release(self, instance: Instance) -> None:
        self._instances.pop(instance.id, None)


class EnvProcess:
    """Instances of `env_cls` held in a child process; every call has a deadline (see the module)."""

    def __init__(self, env_cls: type, concurrent: int | None = None) -> None:
        self.env_cls = env_cls
        self.concurrent = max(1, int(concurrent or getattr(env_cls, "concurrent_steps", 1) or 1))
        self._slots = threading.BoundedSemaphore(self.concurrent)  # calls in flight at once
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._generation = 0
        self._ids = itertools.count()
        self.kills = 0  # children killed at a deadline

    # ---- the interface hosts use (as InProcess's) ------------------------------------------------
    def new(self, deadline_s: float | None) -> tuple[Instance, float]:
        """A new instance (its constructor run in the child) and the seconds the constructor took."""
        with self._slots:
            child = self.started(fresh_class=True)
            instance = Instance(next(self._ids), child.generation)
            _, took = self._ask(child, (NEW, instance.id), deadline_s)
            return instance, took

    def call(
        self, instance: Instance, method: str, args: tuple, deadline_s: float | None
    ) -> tuple[Any, float]:
        """instance.method(*args) in the child -> (value, seconds it took there)."""
        with self._slots:
            child = self.started()
            if instance.generation != child.generation:
                raise InstanceLost(f"instance {instance.id} was held by a child that is gone")
            return self._ask(child, (CALL, instance.id, method, args), deadline_s)

    def class_call(self, method: str, args: tuple, deadline_s: float | None) -> tuple[Any, float]:
        """env_cls.method(*args) in the child (a classmethod: the demonstration)."""
        with self._slots:
            return self._ask(self.started(fresh_class=True), (CLASS_CALL, method, args), deadline_s)

    def release(self, instance: Instance) -> None:
        """Forget an instance (after its close, or when its episode is abandoned); no answer awaited."""
        with self._lock:
            child = self._child
        if child is not None and child.generation == instance.generation:
            child.send_only((DROP, instance.id))

    # ---- the child -------------------------------------------------------------------------------
    def started(self, fresh_class: bool = False) -> _Child:
        """The live child, forked now if there is none, the last one died, or (fresh_class) the
        class was changed since it was forked (a method replaced: the child has the old one)."""
        with self._lock:
            stale = (
                fresh_class
                and self._child is not None
                and self._child.fingerprint != _fingerprint(self.env_cls)
            )
            if self._child is not None and (stale or not self._child.alive):
                self._child.close() if stale else self._child.reap()
                self._child = None
            if self._child is None:
                self._generation += 1
                self._child = _Child(self.env_cls, self.concurrent, self._generation)
            return self._child

    def _ask(self, child: _Child, message: tuple, deadline_s: float | None) -> tuple[Any, float]:
        future = child.send(message)
        try:
            status, value, took = future.result(None if deadline_s is None else deadline_s + REPLY_SLACK_S)
        except FutureTimeout:
            self._kill(child)
            raise CallTimedOut(f"no answer within {deadline_s:g}s") from None
        except InstanceLost:
            self._forget(child)
            raise
        if status == "raised":
            type_name, text = value
            raise EnvCallError(type_name, text, took)
        return value, took

    def _kill(self, child: _Child) -> None:
        with self._lock:
            if self._child is child:
                self._child = None
                self.kills += 1
        child.kill()

    def _forget(self, child: _Child) -> None:
        with self._lock:
            if self._child is child:
                self._child = None
        child.kill()  # dead or dying already: its pipe closed

    @property
    def pid(self) -> int | None:
        """The live child's process id (None before the first call)."""
        with self._lock:
            return self._child.pid if self._child is not None else None

    def close(self) -> None:
        """End the child (it exits once its pipe closes; killed if it does not within a second)."""
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            child.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


_local = threading.local()


def thread_process(env_cls: type) -> EnvProcess:
    """This thread's child process for `env_cls`, for the calls a task makes outside an episode host
    (its demonstrations, its checks): one per thread, so that one thread's deadline never ends
    another's instances; it closes when its thread ends."""
    processes = getattr(_local, "processes", None)
    if processes is None:
        processes = _local.processes = {}
    if env_cls not in processes:
        processes[env_cls] = EnvProcess(env_cls)
    return processes[env_cls]


# ---- the parent's side of one child ---------------------------------------------------------------
def _fingerprint(env_cls: type) -> tuple:
    """What the class and its bases hold now (each attribute's identity)."""
    return tuple(
        (id(klass), tuple((name, id(value)) for name, value in vars(klass).items()))
        for klass in env_cls.__mro__
        if klass is not object
    )


class _Child:
    def __init__(self, env_cls: type, concurrent: int, generation: int):
        self.generation = generation
        self.fingerprint = _fingerprint(env_cls)
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        with warnings.catch_warnings():  # Python 3.12 warns of fork in a process with threads
            warnings.simplefilter("ignore", DeprecationWarning)
            from_main = threading.current_thread() is threading.main_thread()
            pid = os.fork()
        if pid == 0:  # the child: never returns into the parent's code
            code = 0
            try:
                os.close(requests_w)
                os.close(replies_r)
                serve(env_cls, concurrent, requests_r, replies_w, from_main)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(requests_r)
        os.close(replies_w)
        self.pid = pid
        self._out, self._in = requests_w, replies_r
        self._send_lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._pending_lock = threading.Lock()
        self._ids = itertools.count()
        self._gone = False
        self._reaped = False
        self._open_fds = {requests_w, replies_r}
        self._fds_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"env-process-{pid}", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return not self._gone

    def send(self, message: tuple) -> Future:
        future: Future = Future()
        with self._pending_lock:
            if self._gone:
                future.set_exception(InstanceLost("the environment's process is gone"))
                return future
            request = next(self._ids)
            self._pending[request] = future
        try:
            self._write((request, message))
        except OSError:  # the child is gone: the reader fails the call
            self._fail_all()
        return future

    def send_only(self, message: tuple) -> None:
        with contextlib.suppress(OSError):
            self._write((None, message))

    def _write(self, obj: Any) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            write_all(self._out, HEADER.pack(len(data)) + data)

    def _read(self) -> None:
        while True:
            try:
                message = read_message(self._in)
            except (OSError, EOFError, pickle.UnpicklingError):
                message = None
            if message is None:
                break
            request, reply = message
            with self._pending_lock:
                future = self._pending.pop(request, None)
            if future is not None:
                future.set_result(reply)
        self._fail_all()

    def _fail_all(self) -> None:
        with self._pending_lock:
            self._gone = True
            pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(InstanceLost("the environment's process is gone"))

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)  # not yet in its own group: still ours
        self.reap()

    def close(self) -> None:
        self._close_fd(self._out)  # the child reads EOF and exits
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and not self._reaped:
            if self._wait(os.WNOHANG):
                break
            time.sleep(0.01)
        if not self._reaped:
            self.kill()

    def reap(self) -> None:
        """Wait for the (dead or dying) child; close our pipe ends once the reader is done with its own."""
        self._wait(0)
        self._close_fd(self._out)
        if threading.current_thread() is not self._reader:
            self._reader.join(1.0)  # the child's end closed with it: the reader is at EOF
        if not self._reader.is_alive():
            self._close_fd(self._in)

    def _close_fd(self, fd: int) -> None:
        """Close one of our pipe ends once (a number closed twice may be another's by then)."""
        with self._fds_lock:
            if fd not in self._open_fds:
                return
            self._open_fds.discard(fd)
        with contextlib.suppress(OSError):
            os.close(fd)

    def _wait(self, flags: int) -> bool:
        if self._reaped:
            return True
        try:
            pid, _ = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped already (by us, or by someone waiting on any child)
            pid = self.pid
        if pid == self.pid:
            self._reaped = True
        return self._reaped


__all__ = [
    "CallTimedOut",
    "EnvCallError",
    "EnvProcess",
    "InProcess",
    "Instance",
    "InstanceLost",
    "thread_process",
]
