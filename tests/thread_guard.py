"""A pytest plugin: a test that leaves a non-daemon thread running fails the session, never hangs it.

Python joins every non-daemon thread (an executor's workers among them) before a process exits,
so one such thread stuck in a test kept pytest alive after its summary, until CI's limit. At the
end of the session this waits a little for such threads, then names each with the test during
which it started (and the phase: setup, call or teardown, a fixture's teardown included) and its
stack as it is now, and ends the process with a failing status instead of waiting for them.
A session ends with its own status without Python's finalization (`pytest_unconfigure`).

`THREAD_GUARD_GRACE_S` (seconds) overrides how long threads that are only finishing get.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Generator

import pytest

GRACE_S = float(os.environ.get("THREAD_GUARD_GRACE_S", "60"))  # threads only finishing get this long
_stuck: list[str] = []
_session: list[pytest.Session] = []  # this process's session, for its exit status at the very end
# Each non-daemon thread started during a test: where ("nodeid (phase)"). Weak, so a thread that
# ended is forgotten with its object.
_started_in: weakref.WeakKeyDictionary[threading.Thread, str] = weakref.WeakKeyDictionary()


def _live_non_daemon() -> list[threading.Thread]:
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def _record_new(before: set[threading.Thread], where: str) -> None:
    for t in _live_non_daemon():
        if t not in before and t not in _started_in:
            _started_in[t] = where


def _watch(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    before = set(threading.enumerate())
    try:
        yield
    finally:
        _record_new(before, f"{item.nodeid} ({phase})")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _watch(item, "setup"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _watch(item, "call"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    return (yield from _watch(item, "teardown"))  # module and session fixtures end here too


def _describe(threads: list[threading.Thread]) -> list[str]:
    frames = sys._current_frames()
    lines = []
    for t in threads:
        where = _started_in.get(t, "no test (collection, session start or a plugin)")
        stack = "".join(traceback.format_stack(frames[t.ident])) if t.ident in frames else "(no frame)\n"
        lines.append(f"non-daemon thread {t.name!r} still running at exit, started during {where}:\n{stack}")
    return lines


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    deadline = time.monotonic() + GRACE_S
    while _live_non_daemon() and time.monotonic() < deadline:
        time.sleep(0.1)
    _stuck[:] = _describe(_live_non_daemon())
    if _stuck:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _session[:] = [session]


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The last hook: report the stuck threads, then end the process with the session's status.

    Nothing is left to run by then: Python's finalization would only join the stuck threads and
    tear down native libraries (Ray's core worker, torch's thread pools), and such a teardown once
    crashed with SIGSEGV after a green summary, turning a passing suite into a failing exit. An
    xdist worker without stuck threads ends normally (its controller expects that).
    """
    sys.stdout.flush()
    if _stuck:
        sys.stderr.write(
            "\n".join(_stuck) + "\nthe session fails: these threads would keep it from exiting\n"
        )
        sys.stderr.flush()
        os._exit(int(pytest.ExitCode.TESTS_FAILED))
    if _session and not hasattr(config, "workerinput"):
        sys.stderr.flush()
        os._exit(int(_session[0].exitstatus))
