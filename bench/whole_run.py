"""One whole run of `python -m service.train` for a benchmark variant, in a process of its own that
starts its own Ray; its GRPO steps' records (`async` and `autoscale` sections)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def grpo_records(
    variant: str,
    preset: str,
    run_dir: Path,
    sets: Sequence[str],
    steps: int,
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Run `--preset preset --set ...` into `run_dir` (extra `env` on top of this one's, less
    RAY_ADDRESS); its `steps` GRPO records, or RuntimeError in one line naming `variant`."""
    argv = [sys.executable, "-m", "service.train", "--preset", preset, "--run-dir", str(run_dir)]
    argv += [word for value in sets for word in ("--set", value)]
    run_env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a Ray of its own
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env={**run_env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the {variant!r} run failed (exit {proc.returncode}): {tail}")
    from service.run_files import read_jsonl

    grpo = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("phase") == "grpo"]
    if len(grpo) != steps:
        raise RuntimeError(f"the {variant!r} run recorded {len(grpo)} GRPO steps of {steps}")
    return grpo
