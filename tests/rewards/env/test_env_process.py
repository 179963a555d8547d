"""Environment instances in a child process: a call past its deadline ends there, whatever it
holds (the GIL, a lock the others need), the child goes and a fresh one serves the next call;
failures come back as the environment's own; the child lives apart from the host's signals and
does not outlive it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rewards.env import Environment, StepResult
from rewards.env.process import CallTimedOut, EnvCallError, EnvProcess, InstanceLost

DEADLINE_S = 1.0  # thousands of times what a step of these environments takes when it returns
SETUP_S = 60.0  # for a new instance and its reset (a child forked first, on a loaded machine)
HANG_S = 600.0  # what a hanging call would take: only the deadline ends it


class Echo(Environment):
    deterministic = True

    def reset(self, row):
        self.n = 0
        return "start"

    def step(self, action):
        self.n += 1
        if action == "spin":  # pure Python: holds the GIL between switch intervals
            began = time.monotonic()
            while time.monotonic() - began < HANG_S:
                pass
        if action == "regex":  # a backtracking match: holds the GIL the whole time
            re.match(r"(a+)+$", "a" * 64 + "b")
        if action == "lock":  # holds a lock every later step needs
            Echo.lock.acquire()
            threading.Event().wait()
        with Echo.lock:
            return StepResult(f"n={self.n}", 1.0, False)

    def episode_info(self):
        return {"pid": os.getpid()}


Echo.lock = threading.Lock()


def _instance(process: EnvProcess):
    instance, _ = process.new(SETUP_S)
    process.call(instance, "reset", ({},), SETUP_S)
    return instance


@pytest.mark.parametrize("action", ["spin", "regex", "lock"])
def test_a_call_past_its_deadline_ends_with_its_child_and_the_next_call_gets_a_fresh_one(action):
    process = EnvProcess(Echo)
    try:
        hanging, other = _instance(process), _instance(process)
        first_pid = process.pid
        with pytest.raises(CallTimedOut):
            process.call(hanging, "step", (action,), DEADLINE_S)
        assert not _alive(first_pid), "the child that ran the late call is still there"
        with pytest.raises(InstanceLost):  # it held this one too
            process.call(other, "step", ("a",), DEADLINE_S)
        fresh = _instance(process)
        assert process.call(fresh, "step", ("a",), DEADLINE_S)[0] == ("n=1", 1.0, False)
        assert process.pid != first_pid and process.kills == 1
    finally:
        process.close()


def test_the_environments_failures_come_back_as_its_own():
    class Fails(Echo):
        def step(self, action):
            if action == "raise":
                raise KeyError("secret")
            return StepResult("x", 1.0, False, {"handle": threading.Lock()})  # cannot cross the pipe

    process = EnvProcess(Fails)
    try:
        instance = _instance(process)
        with pytest.raises(EnvCallError) as raised:
            process.call(instance, "step", ("raise",), DEADLINE_S)
        assert (raised.value.type_name, raised.value.message) == ("KeyError", "'secret'")
        with pytest.raises(EnvCallError, match="cannot be sent back") as unsent:
            process.call(instance, "step", ("a",), DEADLINE_S)
        assert unsent.value.type_name == "TypeError"
        assert process.call(instance, "episode_info", (), DEADLINE_S)[0] == {"pid": process.pid}
        assert process.kills == 0  # failures are answers: the child stays
    finally:
        process.close()


class Together(Echo):
    """Each step waits until four steps wait at once (BrokenBarrierError when they never do)."""

    concurrent_steps = 4
    barrier = threading.Barrier(4, timeout=30)

    def step(self, action):
        self.barrier.wait()
        return super().step(action)


def test_an_environment_that_allows_it_has_its_steps_run_at_once_in_the_child():
    process = EnvProcess(Together)
    try:
        instances = [_instance(process) for _ in range(4)]
        answers: list = [None] * 4

        def step(i: int) -> None:
            answers[i] = process.call(instances[i], "step", ("a",), 60.0)[0]

        threads = [threading.Thread(target=step, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert answers == [("n=1", 1.0, False)] * 4
    finally:
        process.close()


def test_a_class_changed_after_the_fork_gets_a_fresh_child(monkeypatch):
    process = EnvProcess(Echo)
    try:
        instance = _instance(process)
        monkeypatch.setattr(Echo, "reset", lambda self, row: "patched")
        fresh, _ = process.new(SETUP_S)
        assert process.call(fresh, "reset", ({},), SETUP_S)[0] == "patched"
        with pytest.raises(InstanceLost):
            process.call(instance, "step", ("a",), DEADLINE_S)
    finally:
        process.close()


def test_the_child_has_its_own_process_group_and_goes_with_its_host(tmp_path):
    """A signal to the host's group is the host's to handle; a host killed outright leaves no child."""
    script = tmp_path / "host.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from rewards.env.process import EnvProcess\n"
        "from test_env_process import Echo\n"
        "process = EnvProcess(Echo)\n"
        "process.new(5.0)\n"
        "print(process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    host = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        child = int(host.stdout.readline())
        assert os.getpgid(child) == child != os.getpgid(host.pid)
        host.kill()
        host.wait()
        deadline = time.monotonic() + 30  # a guard against a child that stays: it goes at once
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the child outlived its host"
    finally:
        host.kill()


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead, only not reaped yet
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] != "Z"
    except OSError:
        return False


def test_a_host_signal_handler_is_not_the_childs():
    """The host's handler of SIGTERM (the driver's stop flag) is left behind: the child ends on it."""
    previous = signal.signal(signal.SIGTERM, lambda *a: None)
    process = EnvProcess(Echo)
    try:
        _instance(process)
        pid = process.pid
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
    finally:
        signal.signal(signal.SIGTERM, previous)
        process.close()
