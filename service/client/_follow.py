"""A plain iterator over Ray's async log tail (`JobSubmissionClient.tail_job_logs`).

The async generator runs on an event loop in a daemon thread and hands chunks over through
a queue, so `for chunk in client.logs(run_id, follow=True)` also works where the caller's
thread already runs an event loop (Jupyter). Leaving the loop early (break, close) cancels
the tail and closes its websocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator

_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Tail:
    """Runs one async tail on its own loop and thread; `chunks` receives str, _Failure, _END."""

    def __init__(self, make_tail: Callable[[], AsyncIterator[str]]) -> None:
        self.chunks: queue.Queue = queue.Queue()
        self._make_tail = make_tail
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task | None = None
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="log-tail")

    async def _forward(self) -> None:
        try:
            async for chunk in self._make_tail():
                self.chunks.put(chunk)
        except asyncio.CancelledError:
            pass
        except Exception as error:  # handed to the consumer thread, re-raised there
            self.chunks.put(_Failure(error))
        finally:
            self.chunks.put(_END)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self._forward())
        self._started.set()
        try:
            self._loop.run_until_complete(self._task)
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        finally:
            self._loop.close()

    def cancel(self) -> None:
        self._started.wait()
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing to cancel
            self._loop.call_soon_threadsafe(self._task.cancel)


def follow(make_tail: Callable[[], AsyncIterator[str]]) -> Iterator[str]:
    """Yield the chunks of `make_tail()` as they arrive; re-raise its error at the end."""
    tail = _Tail(make_tail)
    tail.thread.start()
    try:
        while (item := tail.chunks.get()) is not _END:
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        if tail.thread.is_alive():
            tail.cancel()
        tail.thread.join(timeout=5)
