"""Probes of what a program can reach of the host and of other executions: the uid it has outside,
the kernel's knobs, what one execution leaves for the next, whether it can make the sandbox fail,
signals to the executor, the seccomp filter and bwrap's own command line."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rewards.sandbox import SandboxLimits, run_python
from rewards.sandbox.uid_slots import FIRST_UID, SLOTS
from rewards.sandbox.warm import POOL, WarmKey

pytestmark = pytest.mark.usefixtures("clean_after")
BOTH_WAYS = pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh"])
REPO = Path(__file__).resolve().parents[3]


def the_sandbox():
    idle = POOL._idle.get(WarmKey.of(sys.executable, SandboxLimits()), [])
    assert len(idle) == 1, idle
    return idle[0]


@BOTH_WAYS
def test_the_program_is_never_root_outside(fresh):
    result = run_python("import os\nprint(os.getuid(), os.geteuid(), os.getgroups())", fresh=fresh)
    uid, euid, groups = result.stdout.split(maxsplit=2)
    assert uid == euid and groups.strip() in ("[]", f"[{uid}]"), result
    if os.geteuid() == 0:  # a slot's own uid, in the host's user namespace
        assert FIRST_UID <= int(uid) < FIRST_UID + SLOTS
        assert run_python("print(open('/proc/self/uid_map').read().split())", fresh=fresh).stdout.startswith(
            "['0', '0'"
        )
    else:
        assert int(uid) == 65534


@BOTH_WAYS
def test_the_kernels_knobs_and_the_executors_proc_files_are_not_writable(fresh):
    knobs = ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/printk_ratelimit",
             "/proc/sysrq-trigger", "/proc/1/oom_score_adj", "/proc/1/environ"]  # fmt: skip
    source = (
        "import os\nfor p in " + repr(knobs) + ":\n    try:\n"
        "        os.close(os.open(p, os.O_WRONLY)); print(p, 'WRITABLE')\n"
        "    except OSError as e: print(p, type(e).__name__)\n"
    )
    result = run_python(source, fresh=fresh)
    assert result.ok and "WRITABLE" not in result.stdout, result
    assert len(result.stdout.splitlines()) == len(knobs)


def test_nothing_of_one_execution_is_there_for_the_next():
    plant = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "for p in ('/dev/planted', '/dev/shm/planted', '/dev/mqueue/planted', '/tmp/planted'):\n"
        "    try: open(p, 'w').write('x'); print(p, 'made')\n    except OSError as e: print(p, type(e).__name__)\n"
        "print('key', libc.syscall(248, b'user', b'planted', b'v', 1, -3))\n"  # add_key to the session keyring
    )
    planted = run_python(plant)
    assert "/dev/planted OSError" in planted.stdout and "key -1" in planted.stdout, planted
    look = "import os\nprint(sorted(os.listdir('/dev/shm') + os.listdir('/dev/mqueue') + os.listdir('/tmp')))"
    assert "planted" not in run_python(look).stdout


def test_the_executor_never_holds_a_programs_text_or_output():
    marker = f"secret-{uuid.uuid4().hex}"
    assert run_python(f"print({marker!r})", stdin=marker, files={"f.txt": marker}).stdout == marker + "\n"
    sandbox = the_sandbox()
    children = Path(f"/proc/{sandbox.proc.pid}/task/{sandbox.proc.pid}/children").read_text().split()
    assert len(children) == 1
    executor = int(children[0])
    with open(f"/proc/{executor}/mem", "rb", buffering=0) as mem:
        for line in Path(f"/proc/{executor}/maps").read_text().splitlines():
            span, perms = line.split()[:2]
            if "r" not in perms:
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                assert marker.encode() not in mem.read(end - start), line
            except (OSError, OverflowError):
                continue


@BOTH_WAYS
def test_a_tree_past_path_max_with_odd_modes_is_the_programs_own_outcome(fresh):
    deep = (
        "import os\nos.chdir('/tmp')\nfor i in range(2500):\n    os.mkdir('dd'); os.chdir('dd')\n"
        "open('f', 'w').write('x'); os.chmod('.', 0)\nos.chdir('/sandbox')\nos.mkdir('locked')\n"
        "open('locked/x', 'w').write('x'); os.chmod('locked', 0)\nprint('made')"
    )
    result = run_python(deep, limits=SandboxLimits(wall_s=20.0), fresh=fresh)
    assert (result.status, result.stdout) == ("ok", "made\n"), result
    after = run_python("import os\nprint(os.listdir('/tmp'), os.listdir('.'))", fresh=fresh)
    assert after.ok and "dd" not in after.stdout and "locked" not in after.stdout, after


def test_sigint_and_every_other_signal_to_the_executor_are_harmless():
    assert run_python("print(1)").ok
    sandbox = the_sandbox()
    result = run_python(
        "import os, signal\nfor s in signal.valid_signals():\n    if s not in (signal.SIGKILL, signal.SIGSTOP):\n"
        "        try: os.kill(1, s)\n        except OSError: pass\nprint('sent')"
    )
    assert result.stdout == "sent\n", result
    assert run_python("print(2)").stdout == "2\n" and the_sandbox() is sandbox


@BOTH_WAYS
def test_the_seccomp_filter_refuses_what_docker_refuses(fresh):
    source = (
        "import ctypes, errno, socket\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "def sys_(n, *a):\n    r = libc.syscall(n, *a); return errno.errorcode.get(ctypes.get_errno()) if r < 0 else 'ALLOWED'\n"
        "print('io_uring_setup', sys_(425, 8, None))\nprint('userfaultfd', sys_(323, 0))\n"
        "print('add_key', sys_(248, b'user', b'k', b'v', 1, -3))\nprint('keyctl', sys_(250, 0, -3, 0))\n"
        "print('bpf', sys_(321, 0, None, 0))\nprint('perf_event_open', sys_(298, None, 0, -1, -1, 0))\n"
        "print('ptrace', sys_(101, 0, 0, 0, 0))\nprint('unshare', sys_(272, 0x10000000))\n"
        "print('mount', sys_(165, b'none', b'/tmp', b'tmpfs', 0, None))\n"
        "for fam, kind, proto in ((40, socket.SOCK_STREAM, 0), (16, socket.SOCK_RAW, 9), (17, socket.SOCK_RAW, 0)):\n"
        "    try: socket.socket(fam, kind, proto).close(); print(fam, 'ALLOWED')\n"
        "    except OSError as e: print(fam, errno.errorcode[e.errno])\n"
        "print('route', len(socket.if_nameindex()))\n"
    )
    result = run_python(source, fresh=fresh)
    assert result.ok and "ALLOWED" not in result.stdout, result
    assert "40 EAFNOSUPPORT" in result.stdout and "route 1" in result.stdout


def test_bwraps_options_are_not_visible_inside():
    result = run_python("print(open('/proc/1/cmdline').read().replace(chr(0), ' '))", fresh=True)
    assert (
        "--args" in result.stdout and "--ro-bind" not in result.stdout and "--setenv" not in result.stdout
    ), result


@pytest.mark.slow
def test_with_the_cgroup_tree_hidden_the_uid_method_runs_and_caps_a_fork_bomb(tmp_path):
    """In a private mount namespace with a tmpfs over /sys/fs/cgroup (a host with no writable
    cgroup), inside a pids cgroup of the test's own (200 processes) in case the cap did not bind."""
    if os.geteuid() != 0 or not Path("/sys/fs/cgroup/pids/cgroup.procs").exists():
        pytest.skip("needs root and the cgroup v1 pids controller for the test's own cap")
    cap = Path("/sys/fs/cgroup/pids") / f"grpo-test-cap-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    cap.mkdir()
    try:
        (cap / "pids.max").write_text("200")
        script = tmp_path / "hidden.py"
        script.write_text(
            "from rewards.sandbox import SandboxLimits, run_python, sandbox_unavailable_reason\n"
            "import os\nprint(os.listdir('/sys/fs/cgroup'), sandbox_unavailable_reason())\n"
            "r = run_python('print(1)')\nprint(r.status, r.stdout.strip(), r.process_limit)\n"
            "count = 'import os, time\\nn = 0\\nfor _ in range(40):\\n    try: pid = os.fork()\\n"
            "    except OSError: break\\n    if pid == 0: time.sleep(2); os._exit(0)\\n    n += 1\\nprint(n)'\n"
            "print('forks', run_python(count, limits=SandboxLimits(processes=8)).stdout.strip())\n"
            "bomb = 'import os\\nwhile True:\\n    try: os.fork()\\n    except OSError: pass'\n"
            "print('bomb', run_python(bomb, limits=SandboxLimits(wall_s=1.0)).status)\n"
        )
        shell = (
            f"echo $$ > {cap}/cgroup.procs && exec unshare -m sh -c "
            f'"mount -t tmpfs none /sys/fs/cgroup && exec {sys.executable} {script}"'
        )
        # the script imports the project from this checkout, whatever the interpreter has installed
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        done = subprocess.run(
            ["sh", "-c", shell], cwd=REPO, env={**os.environ, "PYTHONPATH": path},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        lines = done.stdout.splitlines()
        assert lines[:2] == ["[] None", "ok 1 uid"], (done.stdout, done.stderr)
        forks = int(lines[2].split()[1])
        assert 0 < forks < 8, lines  # 8 processes: the executor, the program and 5 children
        assert lines[3] == "bomb timeout", lines
    finally:
        for _ in range(100):
            try:
                cap.rmdir()
                break
            except OSError:
                import time

                time.sleep(0.05)
