"""What a warm sandbox owes each execution: nothing of the one before it, and a fresh interpreter's ways."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rewards.sandbox import SandboxLimits, run_python
from rewards.sandbox.cgroup import PREFIX, members, own_cgroup
from rewards.sandbox.warm import POOL, WarmKey

pytestmark = pytest.mark.usefixtures("clean_after")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def no_warm_sandbox_before():
    """Each test starts with no warm sandbox: `the_sandbox` counts idle ones, and another module run
    earlier in this process (concurrent code-task scoring) may have left several."""
    POOL.close()


def the_sandbox():
    """The one idle warm sandbox of the default limits (the one the executions above ran on)."""
    idle = POOL._idle.get(WarmKey.of(sys.executable, SandboxLimits()), [])
    assert len(idle) == 1, idle
    return idle[0]


def test_consecutive_executions_share_the_sandbox_but_nothing_of_each_other():
    listing = "import os\nprint(sorted(os.listdir('/tmp')), os.listdir('/dev/shm'), os.listdir('.'))"
    before = run_python(listing).stdout  # /tmp may hold the mount point of an interpreter under /tmp
    first = run_python(
        "import json, sys, os\njson.PLANTED = 1\nsys.modules['planted'] = json\nos.environ['PLANTED'] = '1'\n"
        "for place in ('/tmp/x', '/dev/shm/x', 'x', '.hidden/y'):\n"
        "    os.makedirs(os.path.dirname(place) or '.', exist_ok=True); open(place, 'w').write('x')\n"
        "for top in os.listdir('/tmp'):\n"
        "    try: open(os.path.join('/tmp', top, 'planted'), 'w').write('x')\n    except OSError: pass\n"
        "os.chmod('.hidden', 0)\nprint('planted')"
    )
    assert first.stdout == "planted\n", first
    sandbox = the_sandbox()
    count = sandbox.executions
    second = run_python(
        "import json, sys, os\nprint(hasattr(json, 'PLANTED'), 'planted' in sys.modules, 'PLANTED' in os.environ)"
    )
    assert second.stdout == "False False False\n", second
    assert run_python(listing).stdout == before and "'x'" not in before
    assert the_sandbox() is sandbox and sandbox.executions == count + 2


def test_processes_and_sysv_ipc_an_execution_leaves_are_gone_before_its_result():
    daemon = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.shmget(4242, 4096, 0o1666) >= 0, libc.msgget(4243, 0o1666) >= 0)\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.execv('/bin/sleep', ['sleep', '60'])\n"
        "    os._exit(0)\nos.wait()"
    )
    assert run_python(daemon).stdout == "True True\n"
    sandbox = the_sandbox()
    assert (
        len(members(sandbox.confinement.cgroups.pids)) == 2
    )  # bwrap and the executor (pid 1 inside): nothing else
    after = run_python(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(sorted(p for p in os.listdir('/proc') if p.isdigit()) == sorted(['1', str(os.getpid())]), "
        "libc.shmget(4242, 0, 0), libc.msgget(4243, 0))"
    )
    assert after.stdout == "True -1 -1\n", after


def test_the_executor_cannot_be_traced_or_read_by_the_program():
    result = run_python(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nparent = os.getppid()\n"
        "print(libc.ptrace(16, parent, 0, 0), ctypes.get_errno())\n"
        "for name in ('environ', 'mem', 'fd/11'):  # fd 11: the executor's answers to the host\n"
        "    try:\n        os.close(os.open(f'/proc/{parent}/{name}', os.O_RDWR if name == 'mem' else os.O_RDONLY))\n"
        "        print(name, 'opened')\n    except OSError as e:\n        print(name, type(e).__name__)"
    )
    expected = "-1 1\nenviron PermissionError\nmem PermissionError\nfd/11 PermissionError\n"
    assert result.stdout == expected, result


def test_the_program_cannot_kill_the_executor_and_the_sandbox_survives_it():
    assert run_python("print(1)").ok
    sandbox = the_sandbox()
    result = run_python(
        "import os\nos.kill(os.getppid(), 9)\nprint(os.getppid(), flush=True)\nos.kill(-1, 9)"
    )
    assert (result.status, result.stdout) == ("failed", "1\n") and "ProcessLookupError" in result.stderr, (
        result
    )
    assert run_python("print(2)").stdout == "2\n" and the_sandbox() is sandbox


def test_an_executor_killed_from_outside_mid_execution_is_killed_and_replaced():
    import threading

    assert run_python("print(1)").ok
    sandbox = the_sandbox()
    argv = {
        p: Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        for p in members(sandbox.confinement.cgroups.pids)
    }
    executor = [p for p, args in argv.items() if args[1] == b"/program/executor.py"]
    assert len(executor) == 1
    threading.Timer(0.3, os.kill, (executor[0], signal.SIGKILL)).start()
    # the program would sleep a minute: its result comes when the executor dies, not when it ends
    result = run_python("import time; time.sleep(60)", limits=SandboxLimits(wall_s=120, cpu_s=120))
    assert (result.status, result.exit_code) == ("killed", None), result
    # 0.3 s expected: 30 s is 100x the kill and half the sleep
    assert "executor" in result.detail and result.seconds < 30
    assert not sandbox.alive() and run_python("print(2)").stdout == "2\n"
    assert the_sandbox() is not sandbox


def test_a_program_is_run_as_a_fresh_interpreter_would_run_it():
    source = textwrap.dedent(
        """\
        import atexit, sys, threading, time
        atexit.register(lambda: print("atexit ran", flush=True))
        def late():
            time.sleep(0.2)
            print("thread joined", flush=True)
        threading.Thread(target=late).start()
        print(__name__, __file__, sys.argv, file=sys.stderr)
        sys.exit(3)
        """
    )
    result = run_python(source)
    assert (result.status, result.exit_code) == ("failed", 3), result
    assert result.stdout == "thread joined\natexit ran\n"
    assert result.stderr == "__main__ /program/main.py ['/program/main.py']\n"
    raised = run_python("x = 1\nraise KeyError('k')")
    assert raised.stderr.splitlines()[1:] == [
        '  File "/program/main.py", line 2, in <module>',
        "KeyError: 'k'",
    ]
    message = run_python("import sys; sys.exit('bye')")
    assert (message.status, message.exit_code, message.stderr) == ("failed", 1, "bye\n")


def test_cpu_seconds_bind_each_execution_not_the_sandbox():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\nprint('done')"
    limits = SandboxLimits(cpu_s=1.0)
    assert [run_python(burn, limits=limits).status for _ in range(3)] == ["ok"] * 3


def test_the_sandbox_ends_with_the_process_that_started_it():
    script = (
        "import os, sys, time\nfrom rewards.sandbox import run_python\n"
        "print(run_python('print(1)').stdout.strip(), os.getpid(), flush=True)\ntime.sleep(60)"
    )
    host = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        first, pid = host.stdout.readline().split()
        assert first == "1"
        cgroups = [p for p in own_cgroup("pids").glob(f"{PREFIX}{pid}-*")]
        assert len(cgroups) == 1 and len(members(cgroups[0])) == 2
    finally:
        host.kill()
        host.wait()
    deadline = time.monotonic() + 10
    while members(cgroups[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert members(cgroups[0]) == []
    cgroups[0].rmdir()
    memory = own_cgroup("memory")
    for left in memory.glob(f"{PREFIX}{pid}-*") if memory is not None else ():
        left.rmdir()


def test_where_warm_sandboxes_do_not_work_every_execution_gets_a_fresh_one(monkeypatch):
    from rewards.sandbox import run as run_module

    assert run_module.warm_sandboxes_work()  # they do here
    POOL.close()
    monkeypatch.setattr(run_module, "_warm_works", [False])
    result = run_python(
        "print(open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode().split('/')[-1])"
    )
    command = run_module.run_command(["cat", "a.txt"], files={"a.txt": "y"})
    assert (result.status, result.stdout) == ("ok", "bwrap\n")  # pid 1 is bwrap's init, no executor
    assert (command.status, command.stdout) == ("ok", "y") and POOL.idle_count() == 0
