"""The child's side of `rewards.env.process`: messages over a pipe, and the loop that runs an
environment's calls in the child.

Every message is a pickled object after its length (8 bytes). A request is (id, (kind, ...)):
NEW builds an instance, CALL runs one of its methods, CLASS_CALL a method of the class, DROP
forgets an instance (no answer; id None). An answer is (id, (status, value, seconds)): status
"ok" with the value, or "raised" with the exception's type name and text.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import io
import os
import pickle
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

NEW, CALL, CLASS_CALL, DROP = "new", "call", "class", "drop"
HEADER = struct.Struct("!Q")
PARENT_CHECK_S = 1.0  # how often the child looks whether its parent is still there
_PR_SET_PDEATHSIG = 1


class EnvCallError(Exception):
    """The environment's own code raised in the child: its exception's type name and text."""

    def __init__(self, type_name: str, message: str, took_s: float):
        super().__init__(message)
        self.type_name, self.message, self.took_s = type_name, message, took_s

    def __reduce__(self):
        return type(self), (self.type_name, self.message, self.took_s)


def timed_call(fn: Callable[..., Any], args: tuple) -> tuple[Any, float]:
    """fn(*args) and the seconds it took; EnvCallError when it raises."""
    began = time.perf_counter()
    try:
        out = fn(*args)
    except Exception as exc:
        raise EnvCallError(type(exc).__name__, str(exc), time.perf_counter() - began) from exc
    return out, time.perf_counter() - began


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_message(fd: int) -> Any:
    header = _read_exactly(fd, HEADER.size)
    if header is None:
        return None
    body = _read_exactly(fd, HEADER.unpack(header)[0])
    return None if body is None else pickle.loads(body)


def serve(env_cls: type, concurrent: int, requests: int, replies: int, from_main: bool) -> None:
    """The child's loop: each request is answered by (request, (status, value, seconds))."""
    os.setpgid(0, 0)  # its own group: a signal to the host's group is the host's to handle
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    _die_with_parent(from_main)
    gc.freeze()  # the parent's objects are never collected here: their pages stay shared
    # fresh writers: the parent's may have been locked by another thread when it forked
    sys.stdout = io.TextIOWrapper(io.FileIO(os.dup(1), "w"), line_buffering=True, errors="replace")
    sys.stderr = io.TextIOWrapper(io.FileIO(os.dup(2), "w"), line_buffering=True, errors="replace")
    instances: dict[int, Any] = {}
    lock = threading.Lock()
    pool = ThreadPoolExecutor(concurrent, thread_name_prefix="env-step") if concurrent > 1 else None

    def answer(request: int | None, message: tuple) -> None:
        reply = _handle(env_cls, instances, message)
        if request is None:
            return
        try:
            data = pickle.dumps((request, reply), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a value that cannot cross the pipe
            what = (
                f"returned a {type(reply[1]).__name__} that cannot be sent back ({type(exc).__name__}: {exc})"
            )
            data = pickle.dumps((request, ("raised", ("TypeError", what), reply[2])))
        with lock:
            write_all(replies, HEADER.pack(len(data)) + data)

    while True:
        message = read_message(requests)
        if message is None:  # the parent closed the pipe (or is gone)
            return
        request, body = message
        if pool is None or body[0] == DROP:
            answer(request, body)
        else:
            pool.submit(answer, request, body)


def _handle(env_cls: type, instances: dict[int, Any], message: tuple) -> tuple[str, Any, float]:
    kind = message[0]
    try:
        if kind == NEW:
            obj, took = timed_call(env_cls, ())
            instances[message[1]] = obj
            return "ok", None, took
        if kind == DROP:
            instances.pop(message[1], None)
            return "ok", None, 0.0
        if kind == CALL:
            _, key, method, args = message
            return ("ok", *timed_call(getattr(instances[key], method), args))
        _, method, args = message
        return ("ok", *timed_call(getattr(env_cls, method), args))
    except EnvCallError as exc:
        return "raised", (exc.type_name, exc.message), exc.took_s
    except Exception as exc:  # an instance unknown here (dropped), a missing method
        return "raised", (type(exc).__name__, str(exc)), 0.0


def _die_with_parent(from_main: bool) -> None:
    """Exit once the parent is gone (checked every PARENT_CHECK_S by a thread); forked by the main
    thread, also SIGKILL from the kernel when the parent dies (Linux: the signal comes when the
    thread that forked ends, which for the main thread is the process's end)."""
    parent = os.getppid()
    if from_main:
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # gone between the fork and the prctl
        os._exit(0)

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_S)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="env-parent-watch", daemon=True).start()
