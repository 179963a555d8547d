"""The thread guard (`thread_guard.py`): a session whose test leaves a non-daemon thread running
fails, ends instead of hanging, and names the test during which the thread started."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS_DIR = Path(__file__).resolve().parent

INNER = """
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

_release = threading.Event()  # never set: the leaked worker waits until the process ends
_kept = []  # an executor that is garbage collected lets its workers go: keep the leaked one


def test_clean():
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(lambda: 1).result() == 1


def test_leaks_an_executor():
    pool = ThreadPoolExecutor(1)  # never shut down: its worker stays, idle
    pool.submit(lambda: None).result()
    _kept.append(pool)


@pytest.fixture
def thread_at_teardown():
    yield
    threading.Thread(target=_release.wait, name="from-teardown").start()


def test_leaks_in_fixture_teardown(thread_at_teardown):
    pass
"""


def test_a_leaked_thread_fails_the_session_and_names_its_test(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(TESTS_DIR))
    monkeypatch.setenv("THREAD_GUARD_GRACE_S", "0.5")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "thread_guard", "-p", "no:cacheprovider", timeout=120)
    result.stdout.fnmatch_lines(["*3 passed*"])  # every test passed; the session fails all the same
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    err = result.stderr.str()
    assert "non-daemon thread 'ThreadPoolExecutor-" in err
    assert "started during test_inner.py::test_leaks_an_executor (call)" in err
    assert "non-daemon thread 'from-teardown'" in err
    assert "started during test_inner.py::test_leaks_in_fixture_teardown (teardown)" in err
    assert "test_clean" not in err
    assert "the session fails: these threads would keep it from exiting" in err


def test_a_clean_session_passes(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(TESTS_DIR))
    monkeypatch.setenv("THREAD_GUARD_GRACE_S", "0.5")
    pytester.makepyfile(test_inner="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "thread_guard", "-p", "no:cacheprovider", timeout=120)
    assert result.ret == pytest.ExitCode.OK
    assert "non-daemon thread" not in result.stderr.str()


@pytest.mark.parametrize(
    ("source", "status"),
    [
        ("def test_fails():\n    assert False\n", pytest.ExitCode.TESTS_FAILED),
        ("X = 1\n", pytest.ExitCode.NO_TESTS_COLLECTED),
    ],
)
def test_the_session_ends_with_its_own_status(pytester: pytest.Pytester, monkeypatch, source, status):
    """The guard ends the process itself (no Python finalization): the status is the session's."""
    monkeypatch.setenv("PYTHONPATH", str(TESTS_DIR))
    pytester.makepyfile(test_inner=source)
    result = pytester.runpytest_subprocess("-p", "thread_guard", "-p", "no:cacheprovider", timeout=120)
    assert result.ret == status
