"""A pytest plugin: a test that leaves a non-daemon thread running fails the session, never hangs it.

Python joins every non-daemon thread (an executor's workers among them) before a process exits,
so one such thread stuck in a test kept pytest alive after its summary, until CI's limit. At the
end of the session this waits a little for such threads, then names each with its stack, and ends
the process with a failing status instead of waiting for them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback

import pytest

GRACE_S = 60.0  # threads that are only finishing up get this long
_stuck: list[str] = []


def _live_non_daemon() -> list[threading.Thread]:
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def _describe(threads: list[threading.Thread]) -> list[str]:
    frames = sys._current_frames()
    lines = []
    for t in threads:
        stack = "".join(traceback.format_stack(frames[t.ident])) if t.ident in frames else "(no frame)\n"
        lines.append(f"non-daemon thread {t.name!r} still running at exit:\n{stack}")
    return lines


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    deadline = time.monotonic() + GRACE_S
    while _live_non_daemon() and time.monotonic() < deadline:
        time.sleep(0.1)
    _stuck[:] = _describe(_live_non_daemon())
    if _stuck:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    """The last hook: report the stuck threads and exit without joining them."""
    if not _stuck:
        return
    sys.stdout.flush()
    sys.stderr.write("\n".join(_stuck) + "\nthe session fails: these threads would keep it from exiting\n")
    sys.stderr.flush()
    os._exit(int(pytest.ExitCode.TESTS_FAILED))
