"""Calls that wait for company: how a test sees that work runs side by side without timing it.

    company = Company(8)
    def reward(completion, target):
        return 1.0 if company.wait() else 0.0     # answers once 8 calls have been inside at once

Each call answers only once `size` calls have been inside at the same time, which only calls run
side by side can reach: one after another, each would be alone. Once reached, later calls pass at
once. `guard_s` is only a guard against a hang (the caller's own deadline usually comes first):
past it a call gives up and says it was not met. `most` is the most calls seen inside at once.
"""

from __future__ import annotations

import asyncio
import threading
import time


class Company:
    def __init__(self, size: int, guard_s: float = 10.0):
        self.size, self.guard_s = size, guard_s
        self.inside = self.most = 0
        self._changed = threading.Condition()

    def _enter(self) -> None:
        with self._changed:
            self.inside += 1
            self.most = max(self.most, self.inside)
            self._changed.notify_all()

    def _leave(self) -> None:
        with self._changed:
            self.inside -= 1

    def _met(self) -> bool:
        return self.most >= self.size

    def wait(self) -> bool:
        """Block this thread until `size` calls have been inside at once; False past `guard_s`."""
        self._enter()
        try:
            with self._changed:
                return self._changed.wait_for(self._met, self.guard_s)
        finally:
            self._leave()

    async def wait_async(self) -> bool:
        """The same on an event loop, in short sleeps that leave the loop to the other calls."""
        self._enter()
        try:
            give_up_at = time.monotonic() + self.guard_s
            while not self._met() and time.monotonic() < give_up_at:
                await asyncio.sleep(0.001)
            return self._met()
        finally:
            self._leave()
