"""`python -m service.train` as a child process, as a user runs it.

result = run_train("--preset", "smoke", "--run-dir", str(run_dir), sets=["run.backend=local"], env=shared_env())
assert_ran(result)

A run started with `env=shared_env()` joins the session's shared Ray head, as `ray job submit`
runs join a cluster: starting and stopping a Ray of its own costs a run about 5 CPU-seconds and
5 s, which the whole runs then pay once a tier instead of once a run. Without it the run
starts its own Ray, as the Quickstart's does: what a test of its own Ray (its size, its workers'
environment, its teardown) needs, and what a command refused before Ray starts costs nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from tests.service.ray_head import RayHead, start_token_head, stop_head

REPO = Path(__file__).resolve().parents[2]


def child_env(**extra: str) -> dict[str, str]:
    """This environment without RAY_ADDRESS (so the run starts its own Ray, never joins another),
    unbuffered (a line printed is a line read), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


# Logical CPUs of the shared head: the most any whole run here reserves (trainer and reward workers).
SHARED_HEAD_CPUS = 8
_shared: list[RayHead] = []  # started on first use, one per test process (each xdist worker has its own)


def shared_env(**extra: str) -> dict[str, str]:
    """`child_env` joined to the session's shared Ray head (started on first use), plus `extra`.

    The head's workers get the OpenMP wait policy a run gives the Ray it starts itself, and the
    drivers turn off Ray Train's preemption watcher as such a run does (Ray Train passes the
    driver's value on): the runs here behave as on their own Ray, less its start and stop.
    """
    from actors.run.omp_env import resolve_wait_policy
    from service.config import ScalingConfig
    from service.ray_start import PREEMPTION_WATCHER_ENV

    if not _shared:
        head_env, _ = resolve_wait_policy(
            ScalingConfig().omp_wait_policy, workers_on_node=1, torch_threads=None
        )
        _shared.append(start_token_head(SHARED_HEAD_CPUS, dashboard=False, env=head_env))
    return {**child_env(), **_shared[0].driver_env(), PREEMPTION_WATCHER_ENV: "0", **extra}


def stop_shared_head() -> None:
    """At the end of a tier or of the session (`tests/conftest.py`): stop the shared head, if a run
    started one (the next run that asks for it starts another)."""
    while _shared:
        stop_head(_shared.pop())


def train_argv(*args: str, sets: Iterable[str] = ()) -> list[str]:
    """The command line: `args`, then `--set` for each dotted override in `sets`."""
    return [sys.executable, "-m", "service.train", *args, *(a for s in sets for a in ("--set", s))]


def run_train(
    *args: str, sets: Iterable[str] = (), env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run the command to its end from the repository root, capturing its output (in `env`,
    default: `child_env()`, its own Ray)."""
    return subprocess.run(
        train_argv(*args, sets=sets),
        cwd=REPO,
        env=child_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_ran(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """The run exited 0; otherwise the assertion shows the end of its output."""
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result
