"""A live progress bar for a terminal: one line that updates each step, evaluations above it.

    grpo  62%|██████▏   | 236/380 [01:58] loss -0.0312  reward 0.612  kl 0.0123  1.19 s/step  eta 2m51s
    [eval] step 320 (periodic, grpo policy): reward 0.641  exact 14.8%  valid 62.5%  on 128 ...

The ETA is the run's own (each remaining phase at its recent step time), not tqdm's average.
No machine-readable records here: nothing parses a terminal.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from tqdm import tqdm

from service.console import lines
from service.console.base import LineWriter, Verbosity

BAR_FORMAT = "{desc:<4} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}] {fields}"


class _Bar(tqdm):
    """tqdm with a `{fields}` slot taken as is (its own `{postfix}` adds a leading comma)."""

    fields = ""

    @property
    def format_dict(self):
        return {**super().format_dict, "fields": self.fields}


def _known_width(out: TextIO) -> int | None:
    """None when the terminal tells its size (tqdm follows it); else COLUMNS or 100 columns (a
    terminal of size 0x0, as some pseudo-terminals report, would make tqdm hide its bar)."""
    try:
        if os.get_terminal_size(out.fileno()).columns > 0:
            return None
    except (OSError, ValueError, AttributeError):
        pass
    return shutil.get_terminal_size((100, 24)).columns


class LiveConsole(LineWriter):
    def __init__(self, out: TextIO | None = None, verbosity: Verbosity = Verbosity.NORMAL):
        self.out = out if out is not None else sys.stdout
        self.verbosity = verbosity
        self._bar: _Bar | None = None

    def _write(self, line: str) -> None:
        if self._bar is not None:
            self._bar.write(line, file=self.out)
        else:
            print(line, file=self.out, flush=True)

    def step(self, progress: Mapping[str, Any]) -> None:
        if self.verbosity is Verbosity.QUIET:
            return
        step, total = int(progress["step"]), int(progress["total_steps"])
        if self._bar is None:
            width = _known_width(self.out)
            self._bar = _Bar(
                total=total, initial=step - 1, file=self.out, bar_format=BAR_FORMAT, leave=True,
                dynamic_ncols=width is None, ncols=width or None, nrows=None if width is None else 24,
                mininterval=0.1,
            )  # fmt: skip
        self._bar.set_description_str(str(progress["phase"]), refresh=False)
        self._bar.fields = f"{lines.step_fields(progress)}  eta {lines.duration(progress.get('eta_s'))}"
        self._bar.update(step - self._bar.n)

    def evaluation(self, progress: Mapping[str, Any], record: Mapping[str, Any]) -> None:
        if self.verbosity is Verbosity.QUIET:
            return
        self._write(lines.eval_line(record))
        if self.verbosity is Verbosity.VERBOSE:
            for line in lines.sample_lines(record):
                self._write(line)

    def summary(self, summary: Mapping[str, Any], reports: list[str]) -> None:
        self.close()
        for line in lines.summary_lines(summary, reports):
            print(line, file=self.out, flush=True)

    @contextlib.contextmanager
    def external_output(self) -> Iterator[None]:
        if self._bar is None:
            yield
            return
        with tqdm.external_write_mode(file=self.out):
            yield

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
