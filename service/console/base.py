"""What every console offers the run's record keeping, and how much it says."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol


class Verbosity(enum.Enum):
    QUIET = "quiet"  # warnings and the summary (a job log keeps its machine-readable records)
    NORMAL = "normal"  # + progress and one line per evaluation
    VERBOSE = "verbose"  # + every step, evaluation samples, checkpoints, the config, Ray's own logs


class Console(Protocol):
    """Where the run's progress is shown: a live display on a terminal, plain lines in a job log."""

    def header(self, line: str) -> None:
        """A line about the run as a whole (its directory, its start); left out when quiet."""

    def detail(self, line: str) -> None:
        """A line only `--verbose` shows (checkpoints, the resolved config)."""

    def warning(self, text: str) -> None:
        """Something the user must act on; always shown."""

    def step(self, progress: Mapping[str, Any]) -> None:
        """A finished step's progress record (see `service.progress`)."""

    def evaluation(self, progress: Mapping[str, Any], record: Mapping[str, Any]) -> None:
        """A held-out evaluation: its progress record and its eval.jsonl row."""

    def summary(self, summary: Mapping[str, Any], reports: list[str]) -> None:
        """The run's outcome, once."""

    def external_output(self) -> AbstractContextManager[None]:
        """Wraps output written by others (Ray's worker lines), so a live display stays whole."""

    def close(self) -> None: ...


class LineWriter:
    """What both consoles say the same way; `_write` puts one line out."""

    verbosity: Verbosity

    def _write(self, line: str) -> None:
        raise NotImplementedError

    def header(self, line: str) -> None:
        if self.verbosity is not Verbosity.QUIET:
            self._write(line)

    def detail(self, line: str) -> None:
        if self.verbosity is Verbosity.VERBOSE:
            self._write(line)

    def warning(self, text: str) -> None:
        self._write(f"[train] warning: {text}")
