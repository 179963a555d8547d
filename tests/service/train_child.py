"""`python -m service.train` as a child process, as a user runs it, on its own embedded Ray.

result = run_train("--preset", "smoke", "--run-dir", str(run_dir), sets=["run.backend=local"])
assert_ran(result)
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def child_env(**extra: str) -> dict[str, str]:
    """This environment without RAY_ADDRESS (so the run starts its own Ray, never joins another),
    unbuffered (a line printed is a line read), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def train_argv(*args: str, sets: Iterable[str] = ()) -> list[str]:
    """The command line: `args`, then `--set` for each dotted override in `sets`."""
    return [sys.executable, "-m", "service.train", *args, *(a for s in sets for a in ("--set", s))]


def run_train(
    *args: str, sets: Iterable[str] = (), env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run the command to its end from the repository root, capturing its output."""
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
