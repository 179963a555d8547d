"""Hostile programs, each with the status it must get and what it must not reach.

After every program (the `clean_after` fixture and `leaves_nothing`): no cgroup directory and no
process of the execution is left, no file named for it exists outside, the test process and its
other children are alive, and a trivial program still gets `ok`. The fork bomb runs only after a
quick check that the pids cgroup's cap binds.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
from hostile_programs import CORPUS, MARKER, SECRET, filled
from sandbox_checks import processes_with

from rewards.sandbox import SandboxLimits, run_python, sandbox_unavailable_reason
from rewards.sandbox.warm import POOL

pytestmark = pytest.mark.usefixtures("clean_after")
HOST_PLACES = (
    Path("/tmp"),
    Path.home(),
    Path("/dev/shm"),
    Path("/var/tmp"),
    Path(__file__).resolve().parents[3],
)


@pytest.fixture(scope="module")
def secrets():
    """A fake token in the environment, in a directory under /tmp/ray and in a file under home."""
    os.environ["RAY_AUTH_TOKEN"] = SECRET
    made_ray = not Path("/tmp/ray").exists()
    ray_dir = Path("/tmp/ray") / f"fake_{MARKER}"
    ray_dir.mkdir(parents=True)
    (ray_dir / "auth_token").write_text(SECRET)
    home_token = Path.home() / f".fake_ray_token_{uuid.uuid4().hex[:10]}"
    home_token.write_text(SECRET)
    yield {"ray_token": str(ray_dir / "auth_token"), "home": str(home_token)}
    del os.environ["RAY_AUTH_TOKEN"]
    shutil.rmtree(Path("/tmp/ray") if made_ray else ray_dir)
    home_token.unlink()


@pytest.fixture
def own_pids_cap():
    """The test process in a pids cgroup of its own (1000 processes and threads): whatever way the
    sandbox caps a fork bomb, this cap is around it too."""
    parent = Path("/sys/fs/cgroup/pids")
    if not (parent / "cgroup.procs").exists() or not os.access(parent, os.W_OK):
        pytest.skip("no cgroup v1 pids controller for the test's own cap around the fork bomb")
    own = parent / Path("/proc/self/cgroup").read_text().split("pids:", 1)[1].split("\n", 1)[0].lstrip("/")
    cap = own / f"grpo-test-cap-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    cap.mkdir()
    (cap / "pids.max").write_text("1000")
    (cap / "cgroup.procs").write_text(str(os.getpid()))
    try:
        yield cap
    finally:
        POOL.close()  # a warm sandbox's cgroup sits under the cap
        (own / "cgroup.procs").write_text(str(os.getpid()))
        for _ in range(200):
            try:
                cap.rmdir()
                break
            except OSError:
                import time

                time.sleep(0.05)


@pytest.fixture(scope="module")
def bystander():
    """Another child of the test process: it must outlive every program."""
    child = subprocess.Popen(["sleep", "600"])
    yield child
    child.kill()
    child.wait()


@pytest.fixture
def leaves_nothing(bystander):
    yield
    assert bystander.poll() is None, "a program reached a process outside its sandbox"
    assert processes_with(MARKER) == []
    stray = [str(p) for place in HOST_PLACES if place.is_dir() for p in place.glob(f"*{MARKER}*")]
    assert stray == []


def run(source: str, limits: SandboxLimits | None = None, **kwargs):
    return run_python(source.replace("MARKER", MARKER), limits=limits, **kwargs)


# Every program runs both ways: a child of a warm sandbox (the default) and a fresh sandbox of its own,
# under each way of capping processes this host offers.
BOTH_WAYS = pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh"])
METHODS = [m for m in ("cgroup_v1", "cgroup_v2", "uid") if sandbox_unavailable_reason(m) is None]
EACH_METHOD = pytest.mark.parametrize("method", METHODS)


def with_method(limits: SandboxLimits | None, method: str) -> SandboxLimits:
    return dataclasses.replace(limits or SandboxLimits(), process_limit=method)


def cap_binds(fresh: bool, method: str) -> bool:
    """With 8 pids allowed, the 6th fork fails (bwrap, its init and the program hold 3)."""
    result = run(
        "import os, time\nn = 0\nfor _ in range(30):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(1); os._exit(0)\n"
        "    n += 1\nprint(n)",
        SandboxLimits(processes=8, process_limit=method),
        fresh=fresh,
    )
    return result.status == "ok" and int(result.stdout) < 8


@EACH_METHOD
@BOTH_WAYS
@pytest.mark.parametrize(
    "name, source, statuses, limits, forbidden", CORPUS, ids=[case[0] for case in CORPUS]
)
def test_hostile_program(name, source, statuses, limits, forbidden, fresh, method, secrets, leaves_nothing):
    source = filled(source, secrets["ray_token"], secrets["home"])
    files = {"harness.py": "assert open('expected.txt').read() == '42'\n"} if name == "reward_hack" else None
    result = run(source, with_method(limits, method), files=files, fresh=fresh)
    assert result.process_limit == method, result
    assert result.status in statuses, result
    if forbidden is not None:
        assert forbidden not in result.stdout + result.stderr, result
    if name == "fill_disk":
        assert result.stdout.strip() == "['EFBIG', 'ENOSPC']", result
    if name == "thread_bomb":
        assert 0 < int(result.stdout) < SandboxLimits().processes, result
    if name == "reward_hack":  # the harness given again is the original one, in a fresh directory
        again = run_python(
            "print(open('harness.py').read(), __import__('os').listdir('.'))", files=files, fresh=fresh
        )
        assert again.stdout == f"{files['harness.py']} ['harness.py']\n", again


def test_sockets_to_the_hosts_loopback_are_refused(leaves_nothing):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        result = run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)")
        assert result.status == "failed" and "ConnectionRefusedError" in result.stderr, result
        with pytest.raises(BlockingIOError):
            server.accept()


@pytest.mark.slow
def test_ray_cannot_reach_the_cluster(leaves_nothing):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        source = f"import ray\nray.init(address='127.0.0.1:{port}')\nprint('CONNECTED')"
        result = run(source, SandboxLimits(wall_s=5, cpu_s=5, memory_mb=1024))
        assert result.status in {"failed", "timeout"} and "CONNECTED" not in result.stdout, result
        with pytest.raises(BlockingIOError):
            server.accept()


@pytest.mark.slow
@EACH_METHOD
@BOTH_WAYS
def test_fork_bomb_is_capped_and_cleaned_up(fresh, method, leaves_nothing, own_pids_cap):
    assert cap_binds(fresh, method), "the process cap does not bind: the fork bomb is not run"
    before = len(os.listdir("/proc"))
    source = (
        "import os, subprocess\ntry:\n    subprocess.Popen(['sh', '-c', 'sleep 30; : MARKER'])\nexcept OSError:\n"
        "    pass\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    )
    result = run(source, SandboxLimits(wall_s=1.0, processes=16, process_limit=method), fresh=fresh)
    assert result.status == "timeout", result
    assert len(os.listdir("/proc")) < before + 16
