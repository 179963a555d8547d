"""Benchmark trials forked from a server that has imported torch: a process of its own per trial,
its environment, its failures and time limit reported, and a fresh interpreter where forking is unsafe."""

import os
import textwrap

import pytest

from bench.isolated import IsolatedRunError, close_fork_servers, run_isolated


@pytest.fixture
def helpers(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))  # run_isolated checks the target here first
    (tmp_path / "trial_helpers.py").write_text(
        textwrap.dedent(
            """
            import os, time

            def where(**_):
                return {"pid": os.getpid(), "ppid": os.getppid(), "policy": os.environ.get("OMP_WAIT_POLICY")}

            def fail():
                raise ValueError("the trial's own error")

            def hang():
                time.sleep(60)
            """
        )
    )
    (tmp_path / "threads_at_import.py").write_text(
        textwrap.dedent(
            """
            import threading, time, os

            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()

            def where():
                return {"pid": os.getpid(), "ppid": os.getppid()}
            """
        )
    )
    env = {"PYTHONPATH": str(tmp_path), "OMP_WAIT_POLICY": "PASSIVE"}
    yield env
    close_fork_servers()


def test_each_trial_is_a_process_of_its_own_with_its_environment(helpers):
    first = run_isolated("trial_helpers:where", {}, env=helpers)
    second = run_isolated("trial_helpers:where", {}, env=helpers)
    assert first["pid"] != second["pid"] and os.getpid() not in (first["pid"], second["pid"])
    assert first["ppid"] == second["ppid"] != os.getpid()  # both forked by the same server
    assert first["policy"] == "PASSIVE"


def test_failures_and_time_limits_are_reported(helpers):
    with pytest.raises(IsolatedRunError, match="failed \\(exit 1\\)") as err:
        run_isolated("trial_helpers:fail", {}, env=helpers)
    assert "ValueError: the trial's own error" in str(err.value)
    with pytest.raises(IsolatedRunError, match="did not finish within 1s"):
        run_isolated("trial_helpers:hang", {}, timeout_s=1, env=helpers)
    assert run_isolated("trial_helpers:where", {}, env=helpers)["policy"] == "PASSIVE"  # the server lives on


def test_a_server_with_threads_it_did_not_start_with_does_not_fork(helpers):
    got = run_isolated("threads_at_import:where", {}, env=helpers)
    assert got["ppid"] == os.getpid()  # a fresh interpreter started by this process instead


def test_servers_can_be_switched_off(helpers, monkeypatch):
    monkeypatch.setenv("BENCH_FORKSERVER", "0")
    assert run_isolated("trial_helpers:where", {}, env=helpers)["ppid"] == os.getpid()
