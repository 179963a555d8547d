"""A multi-node Ray cluster on this machine: one `ray start --block` per node, each in a session of its own.

    cluster = LocalCluster(root)
    cluster.start_head()                                   # no CPUs: only GCS, dashboard, drivers
    cluster.add_node("trainer", num_cpus=2, resources={"trainer_node": 1})
    cluster.add_node("reward-a", num_cpus=1, resources={"reward_node": 2}, labels={"role": "reward"})
    cluster.kill("reward-a")                               # SIGKILL of every process of that node
    cluster.shutdown()                                     # kills exactly the nodes it started

Each node is a real raylet with its own resources and labels, so Ray schedules across them as
across machines. A node's processes (raylet, its agents and the Ray workers it spawned) share the
session of its `ray start`, which is how a node is killed all at once and how teardown finds
exactly what this fixture started and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fault_runs import REPO, live_processes

# A dead node is noticed after about period x threshold instead of Ray's default 15 s or more.
FAST_HEALTH_CHECKS = {
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 4,
}
NODE_START_TIMEOUT_S = 90.0
NAME_LABEL = "test-node"
START_ATTEMPTS = 3
OBJECT_STORE_BYTES = 256 * 1024 * 1024  # per node; a run moves little through the store


class NodeExited(AssertionError):
    """`ray start` ended before its node was up."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RayNode:
    name: str
    proc: subprocess.Popen
    log_path: Path
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    node_id: str | None = None

    def processes(self) -> list[Any]:
        """Live processes of this node (its `ray start` session)."""
        return [p for p in live_processes() if p.session == self.proc.pid]

    def kill(self) -> None:
        """SIGKILL every process group of the node's session at once: the node is gone, as a
        machine that lost power is."""
        for _ in range(3):
            groups = {p.pgrp for p in self.processes()}
            if not groups:
                break
            for group in groups:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
            time.sleep(0.2)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


class LocalCluster:
    """The head and the worker nodes this object started, and only those."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        # Ray's socket paths must stay short: a temp dir of its own directly under /tmp.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))
        self.nodes: dict[str, RayNode] = {}
        self.gcs_port = free_port()
        self.dashboard_port = free_port()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def env(self) -> dict[str, str]:
        """The environment of its nodes and of a driver joining it (no auth, this cluster's address)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env["RAY_ADDRESS"] = self.address
        env["RAY_AUTH_MODE"] = "disabled"  # a test cluster on loopback; `ray start` would turn tokens on
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _start(self, name: str, args: list[str], resources: dict, labels: dict) -> RayNode:
        argv = ["ray", "start", "--block", "--disable-usage-stats", f"--temp-dir={self.temp_dir}"]
        argv.append(f"--object-store-memory={OBJECT_STORE_BYTES}")
        argv += [
            f"--dashboard-agent-listen-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            *args,
        ]
        if resources:
            argv.append(f"--resources={json.dumps(resources)}")
        if labels:
            argv.append("--labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
        log_path = self.log_dir / f"node-{name}.log"
        with open(log_path, "a") as log:
            proc = subprocess.Popen(
                argv, cwd=REPO, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        node = RayNode(name, proc, log_path, dict(resources), dict(labels))
        self.nodes[name] = node
        return node

    def start_head(self) -> RayNode:
        """The head: GCS and dashboard, no CPUs or GPUs, so no trainer or reward worker lands on it."""
        args = [
            "--head",
            f"--port={self.gcs_port}",
            "--num-cpus=0",
            "--num-gpus=0",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--ray-client-server-port={free_port()}",
            f"--system-config={json.dumps(FAST_HEALTH_CHECKS)}",
        ]
        return self._start_and_wait("head", args, {}, {})

    def add_node(
        self, name: str, *, num_cpus: float, resources: dict | None = None, labels: dict | None = None
    ) -> RayNode:
        args = [f"--address={self.address}", f"--num-cpus={num_cpus:g}", "--num-gpus=0"]
        # A label naming the node tells it apart in Ray's state API from a twin with the same resources.
        return self._start_and_wait(name, args, resources or {}, {**(labels or {}), NAME_LABEL: name})

    def _start_and_wait(self, name: str, args: list[str], resources: dict, labels: dict) -> RayNode:
        """Start a node and wait for it; again (twice at most) when `ray start` gives up, as it does
        when its raylet takes over 30 s to register on a machine loaded by other work."""
        for attempt in range(START_ATTEMPTS):
            node = self._start(name, args, resources, labels)
            try:
                self.wait_for_nodes([name])
                return node
            except NodeExited:
                node.kill()
                if attempt == START_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def alive_nodes(self) -> list[dict[str, Any]]:
        from ray.util.state import list_nodes

        return [n for n in list_nodes(address=self.dashboard_url, detail=True) if n.state == "ALIVE"]

    def wait_for_nodes(self, names: list[str], timeout_s: float = NODE_START_TIMEOUT_S) -> None:
        """Until each named node is ALIVE in Ray's state API; records its node id."""
        deadline = time.monotonic() + timeout_s
        while True:
            for name in names:
                node = self.nodes[name]
                if node.proc.poll() is not None:
                    raise NodeExited(f"ray node {name} exited:\n{node.log_path.read_text()[-3000:]}")
            with contextlib.suppress(Exception):  # the dashboard may not answer yet
                self._match_node_ids(self.alive_nodes())
                if all(self.nodes[n].node_id for n in names):
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"ray nodes {names} not alive within {timeout_s:g}s")
            time.sleep(1.0)

    def _match_node_ids(self, alive: list[Any]) -> None:
        """Name each alive node: the head by is_head_node, the others by their name label."""
        for info in alive:
            name = "head" if info.is_head_node else (info.labels or {}).get(NAME_LABEL)
            if name in self.nodes and self.nodes[name].node_id is None:
                self.nodes[name].node_id = info.node_id

    def node_named(self, node_id: str) -> str:
        return next((n.name for n in self.nodes.values() if n.node_id == node_id), f"unknown node {node_id}")

    def kill(self, name: str) -> None:
        self.nodes[name].kill()

    def shutdown(self) -> None:
        """Kill every node this cluster started (workers first, the head last) and remove its temp dir."""
        for name in [n for n in self.nodes if n != "head"] + (["head"] if "head" in self.nodes else []):
            self.nodes[name].kill()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
