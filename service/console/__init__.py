"""What a person sees while a run trains: a live bar on a terminal, plain lines in a job log.

    console = make_console(Verbosity.NORMAL)             # picks by whether stdout is a terminal
    console.step(progress); console.evaluation(progress, record); console.summary(summary, reports)

Every line is progress, an evaluation, a warning to act on, or the summary; Ray's own log noise
is filtered out (`service.console.ray_logs`) unless `--verbose` asks for it.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from service.console.base import Console, Verbosity
from service.console.live import LiveConsole
from service.console.plain import Cadence, PlainConsole
from service.run_lock import RAY_JOB_CONFIG_ENV


def is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # a closed or foreign stream
        return False


def make_console(
    verbosity: Verbosity = Verbosity.NORMAL,
    out: TextIO | None = None,
    *,
    every_steps: int = 1,
    interval_s: float = 0.0,
) -> Console:
    """A live bar when `out` (default stdout) is a terminal, else plain periodic lines."""
    out = out if out is not None else sys.stdout
    if is_terminal(out):
        return LiveConsole(out, verbosity)
    # The client reads a Ray job's log through its records; elsewhere --quiet means the summary only.
    records = verbosity is not Verbosity.QUIET or RAY_JOB_CONFIG_ENV in os.environ
    return PlainConsole(out, verbosity, every_steps=every_steps, interval_s=interval_s, records=records)


__all__ = ["Cadence", "Console", "LiveConsole", "PlainConsole", "Verbosity", "is_terminal", "make_console"]
