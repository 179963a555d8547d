"""A real `ray start --head` with token auth, owned and stopped by whoever starts it: a test module
(`ray_token_head`, with the dashboard its clients talk to) or the test session (the whole runs'
shared head, without a dashboard: `train_child.shared_env`).

Several clusters may run on one machine, so the head gets free ports for everything it
would otherwise bind to a fixed default, a short temp dir of its own (Ray's AF_UNIX socket
paths must stay under ~107 bytes), and a session of its own: teardown sends SIGTERM to its
process group, then SIGKILL to the groups left in that session, and touches nothing else
(never `ray stop`, which would kill every cluster on the machine).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STARTUP_TIMEOUT_S = 90.0
STOP_GRACE_S = 5.0  # `ray start --block` can linger a minute on SIGTERM; the rest is killed

# Ray environment that must not leak from the developer's shell into the test head or client.
_RAY_ENV_TO_DROP = (
    "RAY_ADDRESS",
    "RAY_API_SERVER_ADDRESS",
    "RAY_AUTH_MODE",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
)


@dataclass(frozen=True)
class RayHead:
    address: str  # dashboard URL, e.g. http://127.0.0.1:40123 ("" for a head without one)
    token: str
    metrics_url: str  # the node's Prometheus export, e.g. http://127.0.0.1:40125/metrics
    temp_dir: Path
    log_path: Path
    pgid: int
    gcs_address: str  # what a driver joins, e.g. 127.0.0.1:40122

    def client_env(self) -> dict[str, str]:
        """Environment for a CLI process (`ray job submit`, `python -m service.client`)."""
        env = clean_env()
        env.update(RAY_ADDRESS=self.address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token)
        return env

    def driver_env(self) -> dict[str, str]:
        """Environment for a driver that joins this cluster (`ray.init` with RAY_ADDRESS)."""
        env = clean_env()
        env.update(RAY_ADDRESS=self.gcs_address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token)
        return env


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _RAY_ENV_TO_DROP}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free right now (held open together so none repeats)."""
    with contextlib.ExitStack() as stack:
        sockets = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]


# Every port `ray start --head` would otherwise take at a fixed default or pick itself.
_PORT_FLAGS = (
    "port",
    "dashboard-port",
    "metrics-export-port",
    "ray-client-server-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "node-manager-port",
    "object-manager-port",
)


def _head_command(temp_dir: Path, num_cpus: int, dashboard: bool) -> tuple[list[str], dict[str, int]]:
    """(argv, port of each flag) for a head bound to 127.0.0.1 and free ports."""
    ports = dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS)), strict=True))
    command = [
        sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
        f"--num-cpus={num_cpus}", "--num-gpus=0", f"--temp-dir={temp_dir}",
        "--dashboard-host=127.0.0.1", "--disable-usage-stats",
        f"--include-dashboard={str(dashboard).lower()}",
        *(f"--{flag}={port}" for flag, port in ports.items()),
    ]  # fmt: skip
    return command, ports


def _dashboard_ready(address: str, token: str) -> bool:
    """True once the Jobs API answers an authenticated request."""
    request = urllib.request.Request(address + "/api/version", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _runtime_started(log_path: Path) -> bool:
    """True once `ray start` has logged that the head's processes are up (a head without a dashboard)."""
    try:
        return b"Ray runtime started" in log_path.read_bytes()
    except OSError:
        return False


def start_token_head(
    num_cpus: int = 4, *, dashboard: bool = True, env: dict[str, str] | None = None
) -> RayHead:
    """Start a token-auth head and return once it answers: its dashboard's Jobs API, or without a
    dashboard `ray start`'s own line that the runtime started (raises if neither comes). `env`:
    more environment for the head's processes, which its workers inherit."""
    token = secrets.token_hex(32)
    temp_dir = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))  # short: AF_UNIX path limit
    command, ports = _head_command(temp_dir, num_cpus, dashboard)
    address = f"http://127.0.0.1:{ports['dashboard-port']}" if dashboard else ""
    metrics_url = f"http://127.0.0.1:{ports['metrics-export-port']}/metrics"
    env = {**clean_env(), **(env or {})}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    log_path = temp_dir / "head.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    gcs_address = f"127.0.0.1:{ports['port']}"
    head = RayHead(address, token, metrics_url, temp_dir, log_path, pgid=process.pid, gcs_address=gcs_address)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if _dashboard_ready(address, token) if dashboard else _runtime_started(log_path):
            return head
        time.sleep(0.5)
    tail = log_path.read_text(errors="replace")[-3000:]
    stop_head(head)
    raise RuntimeError(f"ray head did not come up within {STARTUP_TIMEOUT_S:.0f}s; log tail:\n{tail}")


def _session_groups(sid: int) -> set[int]:
    """Process groups of the live (non-zombie) processes in session `sid`.

    `ray start` runs in a session of its own; Ray puts its workers in process groups of their
    own inside that session, so the session is what marks "this cluster". Job drivers get a
    session of their own too, and Ray's watcher kills them once their supervisor is gone.
    """
    groups = set()
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_path.read_text()
        except OSError:
            continue  # exited while we looked
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        state, pgrp, session = fields[0], int(fields[2]), int(fields[3])
        if session == sid and state != "Z":
            groups.add(pgrp)
    return groups


def _signal_groups(groups: set[int], sig: signal.Signals) -> None:
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)


def stop_head(head: RayHead) -> None:
    """SIGTERM the head's process group, wait, then SIGKILL the groups left in its session."""
    _signal_groups({head.pgid}, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while _session_groups(head.pgid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(head.pgid, os.WNOHANG)  # reap `ray start` itself so it stops counting
        time.sleep(0.2)
    _signal_groups(_session_groups(head.pgid), signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(head.pgid, 0)
    shutil.rmtree(head.temp_dir, ignore_errors=True)


@contextlib.contextmanager
def token_head(num_cpus: int = 4) -> Iterator[RayHead]:
    head = start_token_head(num_cpus)
    try:
        yield head
    finally:
        stop_head(head)
