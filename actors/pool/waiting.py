"""A worker's event loop and threads for rewards that wait (async def, or plain ones asking for threads).

One loop per worker process, on its own thread, lives as long as the worker: an async reward's
connection made on it stays usable from one call to the next. A call blocks until its chunk's
items are scored (`rewards.concurrent`), `concurrency` items in flight at a time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from actors.pool.daemon_threads import DaemonThreads
from rewards import Scorer, ScoreResult
from rewards.concurrent import score_batch_concurrent


class WaitingRunner:
    def __init__(self, concurrency: int, item_timeout_s: float):
        self.concurrency = concurrency
        self.item_timeout_s = item_timeout_s
        # daemon threads: a threaded reward stuck past its deadline must not keep the worker from exiting
        self._executor = DaemonThreads(concurrency, "reward-io")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="reward-loop", daemon=True)
        self._thread.start()

    def score(
        self, scorer: Scorer, completions: Sequence[Any], targets: Sequence[Any], rows: Sequence[Any] | None
    ) -> list[ScoreResult]:
        work = score_batch_concurrent(
            scorer,
            completions,
            targets,
            rows,
            concurrency=self.concurrency,
            item_timeout_s=self.item_timeout_s,
            executor=self._executor,
            timeout_reason=f"the reward did not answer within pool.item_timeout_s={self.item_timeout_s:g}s",
        )
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._executor.shutdown()
