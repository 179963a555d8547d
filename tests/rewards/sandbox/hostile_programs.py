"""The hostile programs: each with the statuses it may end with and text its output must not hold.

Placeholders filled per run by `filled`: MARKER (a name to look for afterwards, outside), RAYTOKEN
and HOME (files holding SECRET outside the sandbox), REPO (this repository), HOSTPID (the caller).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from rewards.sandbox import SandboxLimits

MARKER = f"sbxmark{uuid.uuid4().hex[:10]}"
SECRET = f"fake-ray-token-{uuid.uuid4().hex}"
SHORT = SandboxLimits(wall_s=1.0, cpu_s=1.0)
# The memory limit must be what ends a memory bomb, however loaded the machine: on 2 busy cores
# filling 512 MB a megabyte at a time once took longer than the default 5 s of wall clock.
PATIENT = SandboxLimits(wall_s=30.0)
REPO = Path(__file__).resolve().parents[3]


def filled(source: str, ray_token: str = "/tmp/ray/auth_token", home: str = "/root/.ray_token") -> str:
    source = source.replace("RAYTOKEN", repr(ray_token)).replace("HOME", repr(home))
    source = source.replace("REPO", repr(str(REPO))).replace("HOSTPID", str(os.getpid()))
    return source.replace("MARKER", MARKER)


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
    ("memory_bomb", "x = []\nwhile True: x.append(bytearray(1 << 20))", {"memory"}, PATIENT, None),
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
    (
        "kill_parent",
        "import os; os.kill(os.getppid(), 9); print('alive')",
        {"ok", "killed", "failed"},
        None,
        None,
    ),
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
        # 3.11 keeps Python frames on the heap: memory, not the C stack; where RLIMIT_AS alone bounds
        # memory (no memory cgroup), filling it a frame at a time may outlast the wall clock
        {"failed", "killed", "memory", "timeout"},
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
