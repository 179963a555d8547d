"""Plain lines for a job log (stdout is not a terminal): periodic progress, evaluations, the summary.

A job log is read two ways: by a person (`ray job logs`, the dashboard) and by the client, which
knows a remote run only through it. So a progress line for the person and a `[grpo-progress]`
record for the client are written together, at the same cadence: never more often than every
`every_steps` steps and `interval_s` seconds, plus the first step, the first step of each phase
and the last one (the last the run took, before its summary, when it stopped or failed early).
Evaluations and the summary always get both. `--quiet` outside a Ray job
(stdout redirected to a file) drops the records too: no client reads them there.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TextIO

from service.console import lines
from service.console.base import LineWriter, Verbosity
from service.progress import PROGRESS_PREFIX, SUMMARY_PREFIX, format_record
from service.run_files import json_safe


class Cadence:
    """Whether a step's progress line is due."""

    def __init__(
        self, every_steps: int = 1, interval_s: float = 0.0, clock: Callable[[], float] = time.monotonic
    ):
        self.every_steps = every_steps
        self.interval_s = interval_s
        self._clock = clock
        self._last_step: int | None = None
        self._last_phase: str | None = None
        self._last_time = 0.0

    def due(self, step: int, phase: str, total_steps: int) -> bool:
        now = self._clock()
        forced = self._last_step is None or phase != self._last_phase or step >= total_steps
        regular = (
            self._last_step is not None
            and step - self._last_step >= self.every_steps
            and now - self._last_time >= self.interval_s
        )
        self._last_phase = phase
        if forced or regular:
            self._last_step, self._last_time = step, now
            return True
        return False


class PlainConsole(LineWriter):
    """Line-by-line output; every line is flushed at once (a job log is read while it grows)."""

    def __init__(
        self,
        out: TextIO | None = None,
        verbosity: Verbosity = Verbosity.NORMAL,
        every_steps: int = 1,
        interval_s: float = 0.0,
        records: bool = True,
    ):
        self.out = out if out is not None else sys.stdout
        self.verbosity = verbosity
        self.records = records  # the machine-readable lines the client reads
        verbose = verbosity is Verbosity.VERBOSE
        self.cadence = Cadence(1 if verbose else every_steps, 0.0 if verbose else interval_s)
        self._unwritten: Mapping[str, Any] | None = None  # the last step, when its line was not due

    def _write(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def step(self, progress: Mapping[str, Any]) -> None:
        if not self.cadence.due(int(progress["step"]), str(progress["phase"]), int(progress["total_steps"])):
            self._unwritten = progress
            return
        self._step(progress)

    def _step(self, progress: Mapping[str, Any]) -> None:
        self._unwritten = None
        if self.verbosity is not Verbosity.QUIET:
            self._write(lines.step_line(progress))
        self._record(PROGRESS_PREFIX, progress)

    def evaluation(self, progress: Mapping[str, Any], record: Mapping[str, Any]) -> None:
        if self.verbosity is not Verbosity.QUIET:
            self._write(lines.eval_line(record))
        if self.verbosity is Verbosity.VERBOSE:
            for line in lines.sample_lines(record):
                self._write(line)
        self._record(PROGRESS_PREFIX, progress)

    def summary(self, summary: Mapping[str, Any], reports: list[str]) -> None:
        if self._unwritten is not None:  # the last step's figures, so the log ends where the run did
            self._step(self._unwritten)
        for line in lines.summary_lines(summary, reports):
            self._write(line)
        self._record(SUMMARY_PREFIX, summary)

    def _record(self, prefix: str, record: Mapping[str, Any]) -> None:
        if self.records:
            self._write(format_record(prefix, json_safe(dict(record))))

    @contextlib.contextmanager
    def external_output(self) -> Iterator[None]:
        """Around output written by others (Ray's forwarded worker lines): nothing to protect here."""
        yield

    def close(self) -> None:
        self.out.flush()
