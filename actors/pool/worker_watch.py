"""What a reward worker's process does besides scoring: its memory, and what its rewards print.

Free of Ray, so each piece is tested directly:

- `rss_mb()`: the resident memory of this process (psutil when installed, else /proc/self/statm).
- `capture_output(cap_bytes)`: a reward's stdout and stderr (Python-level writes: `print`,
  `sys.stdout.write`) kept in a buffer that holds the first `cap_bytes` and only counts the rest.
- `output_notice(...)`: the one console line that shows the first lines of that output.
- `RssWatch`: a worker's RSS step after step, and the one warning per worker when it keeps growing.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1024 * 1024
OUTPUT_CAP_BYTES = 4096  # kept of what one call's rewards print; the rest is counted, then dropped
NOTICE_LINES = 5  # lines of captured output the console shows
NOTICE_LINE_CHARS = 200
MIN_RISE_MB = 4.0  # a step's RSS counts as rising only when it grew by more than this


def rss_mb() -> float | None:
    """Resident set size of this process in MiB; None where it cannot be read."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return psutil.Process().memory_info().rss / MIB
        except Exception:  # a sandbox without /proc access: try statm, then give up
            pass
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / MIB
    except (OSError, ValueError, IndexError):
        return None


class CappedOutput(io.TextIOBase):
    """A text stream that keeps the first `cap_bytes` (UTF-8) written to it and counts the rest.

    Writes from several threads (a threaded reward's items) are serialised by a lock."""

    def __init__(self, cap_bytes: int = OUTPUT_CAP_BYTES):
        super().__init__()
        self.cap_bytes = cap_bytes
        self.written = 0  # bytes written, kept or not
        self._kept = bytearray()
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        data = s.encode("utf-8", "replace")
        with self._lock:
            self.written += len(data)
            room = self.cap_bytes - len(self._kept)
            if room > 0:
                self._kept += data[:room]
        return len(s)

    def text(self) -> str:
        """What was kept (a character cut at the cap is replaced)."""
        with self._lock:
            return self._kept.decode("utf-8", "replace")

    @property
    def dropped(self) -> int:
        """Bytes written beyond the cap."""
        return max(0, self.written - self.cap_bytes)


@contextlib.contextmanager
def capture_output(cap_bytes: int = OUTPUT_CAP_BYTES) -> Iterator[CappedOutput]:
    """sys.stdout and sys.stderr both go to one capped buffer while the block runs.

    The swap is process-wide (every thread's `print` lands here), which suits a reward worker: it
    runs one call at a time, and the threads meanwhile are that call's. Writes made straight to file
    descriptors 1 and 2 (a C extension, a subprocess) are not captured."""
    buffer = CappedOutput(cap_bytes)
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = buffer
    try:
        yield buffer
    finally:
        sys.stdout, sys.stderr = saved


def output_notice(worker: str, head: str, written: int) -> str:
    """One line: the first lines of a reward's output on `worker`, and how much more there was."""
    lines = [ln[:NOTICE_LINE_CHARS] for ln in head.splitlines()[:NOTICE_LINES]]
    shown = " | ".join(lines)
    more = max(0, written - len("\n".join(lines).encode("utf-8", "replace")))
    return (
        f"[pool] warning: reward output (first lines): {shown}; {more} more bytes dropped "
        f"(reward worker {worker}; the rewards' stdout/stderr is captured per call, capped at "
        f"{OUTPUT_CAP_BYTES} bytes, and not printed: this line is shown once)"
    )


@dataclass
class _Track:
    pid: int | None
    values: list[float] = field(default_factory=list)  # RSS per step since this process started
    rising: int = 0  # steps in a row whose RSS grew by more than MIN_RISE_MB


class RssWatch:
    """Each worker's RSS, step after step; one warning per worker when it rises `rising_steps`
    steps in a row or grows more than `growth_mb` above its first figure (a fresh process, after a
    restart or a recycle, starts a new series)."""

    def __init__(self, growth_mb: float, rising_steps: int, limit_mb: float | None = None):
        self.growth_mb = growth_mb
        self.rising_steps = rising_steps
        self.limit_mb = limit_mb
        self._tracks: dict[str, _Track] = {}
        self.warned: set[str] = set()

    def observe(self, step: int, workers: Mapping[str, tuple[int | None, float | None]]) -> list[str]:
        """Book each worker's (pid, RSS MiB) of `step`; the warnings this step raises (at most one
        per worker over the whole run)."""
        warnings = []
        for name, (pid, rss) in workers.items():
            if rss is None:
                continue
            track = self._tracks.get(name)
            if track is None or track.pid != pid:
                track = self._tracks[name] = _Track(pid)
            if track.values and rss > track.values[-1] + MIN_RISE_MB:
                track.rising += 1
            elif track.values:
                track.rising = 0
            track.values.append(rss)
            grown = rss - track.values[0]
            if name in self.warned or not (track.rising >= self.rising_steps or grown > self.growth_mb):
                continue
            self.warned.add(name)
            warnings.append(self._warning(step, name, pid, track))
        return warnings

    def _warning(self, step: int, name: str, pid: int | None, track: _Track) -> str:
        values = track.values
        shown = values if len(values) <= 6 else [*values[:2], *values[-4:]]
        figures = " -> ".join(f"{v:.0f}" for v in shown)
        if len(values) > 6:
            figures = figures.replace(f"{shown[1]:.0f} -> ", f"{shown[1]:.0f} -> ... -> ", 1)
        advice = (
            f"pool.max_worker_rss_mb={self.limit_mb:g} recycles it past that"
            if self.limit_mb is not None
            else "set pool.max_worker_rss_mb to recycle a worker past a limit"
        )
        return (
            f"[pool] warning: reward worker {name} (pid {pid}) grew to {values[-1]:.0f} MB RSS by step {step}: "
            f"{figures} MB over {len(values)} steps ({track.rising} rising in a row); a reward may be "
            f"leaking memory: {advice} (said once per worker)"
        )
