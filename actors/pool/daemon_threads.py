"""An executor of daemon threads, for reward calls that may never return.

Not a ThreadPoolExecutor: Python joins an executor's threads at exit, so a reward stuck forever in
one (the case the deadlines are there for) kept its process from ever exiting. These threads are
daemons: a stuck call is left behind, and the process still exits.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any


class DaemonThreads(Executor):
    """`threads` daemon threads taking calls from one queue, in the order submitted."""

    def __init__(self, threads: int, name: str) -> None:
        if threads < 1:
            raise ValueError(f"DaemonThreads needs at least one thread, got {threads}")
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = threads
        self._closed = False
        for i in range(threads):
            threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True).start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        if self._closed:
            raise RuntimeError("cannot submit to DaemonThreads after shutdown")
        future: Future = Future()
        self._calls.put((future, fn, args, kwargs))
        return future

    def shutdown(self, wait: bool = False, *, cancel_futures: bool = True) -> None:
        """Cancel what has not started (unless told not to); each thread ends after its current
        call, if that ends. Never waits for a call: one stuck forever must not block the caller."""
        self._closed = True
        if cancel_futures:
            with contextlib.suppress(queue.Empty):
                while True:
                    call = self._calls.get_nowait()
                    if call is not None:
                        call[0].cancel()
        for _ in range(self._threads):
            self._calls.put(None)

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            future, fn, args, kwargs = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the caller, as an executor does
                future.set_exception(exc)
