"""SIGTERM (what `ray job stop` sends) and Ctrl-C as a request to stop after the current step."""

from __future__ import annotations

import signal
from typing import Any


class StopSignals:
    """SIGTERM / SIGINT set a flag (the first one); a second one falls back to the default action."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.reason is None:
            self.reason = f"received {signal.Signals(signum).name}"
            return
        self.restore()
        signal.raise_signal(signum)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
