"""Hostile programs, each with the status it must get and what it must not reach.

After every program (the `clean_after` fixture and `leaves_nothing`): no cgroup directory and no
process of the execution is left, no file named for it exists outside, the test process and its
other children are alive, and a trivial program still gets `ok`. The fork bomb runs only after a
quick check that the pids cgroup's cap binds.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
from sandbox_checks import processes_with

from rewards.sandbox import SandboxLimits, run_python

pytestmark = pytest.mark.usefixtures("clean_after")
MARKER = f"sbxmark{uuid.uuid4().hex[:10]}"
SECRET = f"fake-ray-token-{uuid.uuid4().hex}"
HOST_PLACES = (
    Path("/tmp"),
    Path.home(),
    Path("/dev/shm"),
    Path("/var/tmp"),
    Path(__file__).resolve().parents[3],
)
SHORT = SandboxLimits(wall_s=2.0, cpu_s=2.0)


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


# Every program runs both ways: a child of a warm sandbox (the default) and a fresh sandbox of its own.
BOTH_WAYS = pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh"])


def cap_binds(fresh: bool) -> bool:
    """With 8 pids allowed, the 6th fork fails (bwrap, its init and the program hold 3)."""
    result = run(
        "import os, time\nn = 0\nfor _ in range(30):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(1); os._exit(0)\n"
        "    n += 1\nprint(n)",
        SandboxLimits(processes=8),
        fresh=fresh,
    )
    return result.status == "ok" and int(result.stdout) < 8


# (id, source, statuses allowed, limits, text that must not be in stdout+stderr)
CORPUS = [
    ("env_token", "import os; print(dict(os.environ))", {"ok"}, None, SECRET),
    # pid 1 is bwrap (fresh: readable, its emptied environment) or the warm executor (not readable)
    ("proc1_environ", "print(open('/proc/1/environ').read())", {"ok", "failed"}, None, SECRET),
    (
        "all_proc_environ",
        "import os\nfor p in os.listdir('/proc'):\n    try: print(open(f'/proc/{p}/environ').read())\n"
        "    except Exception as e: print(type(e).__name__)",
        {"ok"},
        None,
        SECRET,
    ),
    (
        "ray_temp_dir",
        "import os; print(os.listdir('/tmp')); print(open(RAYTOKEN).read())",
        {"failed"},
        None,
        SECRET,
    ),
    ("ray_real_dir", "import os; print(os.path.exists('/tmp/ray'))", {"ok"}, None, "True"),
    ("home_token", "print(open(HOME).read())", {"failed"}, None, SECRET),
    ("home_listing", "import os; print(os.listdir('/root'))", {"ok"}, None, ".ray"),
    ("repo_invisible", "import os; print(os.path.exists(REPO))", {"ok"}, None, "True"),
    ("etc_shadow", "print(open('/etc/shadow').read())", {"failed"}, None, "root:"),
    ("write_tmp", "open('/tmp/MARKER', 'w').write('x'); print('private')", {"ok"}, None, None),
    ("write_home", "open(HOME + 'MARKER', 'w').write('x')", {"failed"}, None, None),
    ("write_repo", "open(REPO + '/MARKER', 'w').write('x')", {"failed"}, None, None),
    ("write_usr", "open('/usr/MARKER', 'w').write('x')", {"failed"}, None, None),
    ("write_program", "open('/program/main.py', 'w').write('x')", {"failed"}, None, None),
    ("dev_shm", "open('/dev/shm/MARKER', 'w').write('x'); print('private')", {"ok"}, None, None),
    (
        "fill_disk",
        "import errno\ncodes = set()\nfor i in range(200):\n    try:\n        with open(f'big{i}', 'wb') as f:\n"
        "            for _ in range(40): f.write(b'x' * (1 << 20))\n    except OSError as e:\n"
        "        codes.add(errno.errorcode[e.errno])\n        if e.errno == errno.ENOSPC: break\nprint(sorted(codes))",
        {"ok"},
        None,
        None,
    ),
    ("resolve_host", "import socket; socket.gethostbyname('example.com')", {"failed"}, None, None),
    ("interfaces", "import socket; print([n for _, n in socket.if_nameindex()])", {"ok"}, None, "eth"),
    (
        "thread_bomb",
        "import threading, time\nn = 0\ntry:\n    while True:\n"
        "        threading.Thread(target=time.sleep, args=(5,), daemon=True).start(); n += 1\n"
        "except RuntimeError:\n    print(n, flush=True)\nimport os; os._exit(0)",
        {"ok"},
        None,
        None,
    ),
    ("memory_bomb", "x = []\nwhile True: x.append(bytearray(1 << 20))", {"memory"}, None, None),
    ("one_huge_allocation", "b = bytearray(1 << 34)", {"memory"}, None, None),
    ("infinite_loop", "while True: pass", {"timeout"}, SHORT, None),
    ("sleep_forever", "import time; time.sleep(10**6)", {"timeout"}, SHORT, None),
    ("cpu_limit", "while True: pass", {"timeout"}, SandboxLimits(wall_s=10, cpu_s=1), None),
    (
        "ignore_sigterm",
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)\n"
        "while True: pass",
        {"timeout"},
        SHORT,
        None,
    ),
    (
        "megabytes_stdout",
        "import sys\nwhile True: sys.stdout.write('x' * 65536)",
        {"output_limit"},
        None,
        None,
    ),
    (
        "megabytes_stderr",
        "import sys\nwhile True: sys.stderr.write('x' * 65536)",
        {"output_limit"},
        None,
        None,
    ),
    ("kill_parent", "import os; os.kill(os.getppid(), 9); print('alive')", {"ok", "killed"}, None, None),
    ("kill_everything", "import os; os.kill(-1, 9); print('alive')", {"ok", "killed", "failed"}, None, None),
    ("kill_host_pid", "import os; os.kill(HOSTPID, 9)", {"failed"}, None, None),
    ("kill_self", "import os; os.kill(os.getpid(), 9)", {"killed"}, None, None),
    (
        "double_fork_daemon",
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execv('/bin/sh', ['sh', '-c', 'sleep 30; : MARKER'])\n    os._exit(0)\nos.wait(); print('parent done')",
        {"ok"},
        None,
        None,
    ),
    (
        "ptrace_host",
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.ptrace(16, HOSTPID, 0, 0), ctypes.get_errno())",
        {"ok"},
        None,
        "0 0",
    ),
    (
        "new_namespaces",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))",
        {"ok"},
        None,
        "0 0",
    ),
    ("segfault", "import ctypes; ctypes.string_at(0)", {"killed"}, None, None),
    (
        "deep_recursion",
        "import sys\nsys.setrecursionlimit(10**7)\ndef f(n): return f(n + 1) + 1\nf(0)",
        {"failed", "killed", "memory"},  # 3.11 keeps Python frames on the heap: memory, not the C stack
        None,
        None,
    ),
    (
        "reward_hack",
        "open('expected.txt', 'w').write('42')\nopen('harness.py', 'w').write('print(\"PASS\")')\n"
        "print(open('harness.py').read())",
        {"ok"},
        None,
        None,
    ),
]


@BOTH_WAYS
@pytest.mark.parametrize(
    "name, source, statuses, limits, forbidden", CORPUS, ids=[case[0] for case in CORPUS]
)
def test_hostile_program(name, source, statuses, limits, forbidden, fresh, secrets, leaves_nothing):
    repo = str(Path(__file__).resolve().parents[3])
    source = source.replace("RAYTOKEN", repr(secrets["ray_token"])).replace("HOME", repr(secrets["home"]))
    source = source.replace("REPO", repr(repo)).replace("HOSTPID", str(os.getpid()))
    files = {"harness.py": "assert open('expected.txt').read() == '42'\n"} if name == "reward_hack" else None
    result = run(source, limits, files=files, fresh=fresh)
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
        result = run(source, SandboxLimits(wall_s=15, cpu_s=15, memory_mb=1024))
        assert result.status in {"failed", "timeout"} and "CONNECTED" not in result.stdout, result
        with pytest.raises(BlockingIOError):
            server.accept()


@pytest.mark.slow
@BOTH_WAYS
def test_fork_bomb_is_capped_and_cleaned_up(fresh, leaves_nothing):
    assert cap_binds(fresh), "the pids cgroup cap does not bind: the fork bomb is not run"
    before = len(os.listdir("/proc"))
    source = (
        "import os, subprocess\ntry:\n    subprocess.Popen(['sh', '-c', 'sleep 30; : MARKER'])\nexcept OSError:\n"
        "    pass\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    )
    result = run(source, SandboxLimits(wall_s=2.0, processes=16), fresh=fresh)
    assert result.status == "timeout", result
    assert len(os.listdir("/proc")) < before + 16
