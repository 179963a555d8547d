"""`run.backend: local`: the one rank's loop in the driver process, and what a resume must check.

The driver runs `fit()` of what `service.driver.build_run` gives in a background thread: Ray Train's
TorchTrainer, or the `LocalRun` made here, whose loop talks to a `LocalContext` (world 1, the
checkpoints copied into the same `<checkpoint root>/step_<N>` layout Ray Train writes). The
control actor, the reward pool, the records and the console are the same for both.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.run.context import LocalContext, local_device
from actors.run.loop import LocalRun, LoopSpec
from service.config import ServiceConfig
from service.console import Console
from trainer.checkpoint import list_checkpoints

RAY_TRAIN_MARKER = ".validate_storage_marker"  # Ray Train writes it in the root when a run starts


def local_run(cfg: ServiceConfig, spec: LoopSpec, control: Any, console: Console, root: Path) -> LocalRun:
    """The loop of a `run.backend: local` run, checkpointing under `root`."""
    keep_last, use_gpu, say = cfg.checkpoint.keep_last, cfg.scaling.use_gpu, console_writer(console)

    def make_context() -> (
        LocalContext
    ):  # in the run's thread: no CUDA device fails the run, as a worker's would
        return LocalContext(root, keep_last, local_device(use_gpu), say=say)

    return LocalRun(spec, control, make_context)


def local_checkpoints_problem(root: Path) -> str | None:
    """Checkpoints that only a local run can continue: Ray Train resumes from the ones it registered,
    and where it never ran (no storage marker of its own) it would start again at step 1 beside them."""
    if not list_checkpoints(root) or (root / RAY_TRAIN_MARKER).exists():
        return None
    return (
        f"run.backend: 'ray_train' cannot continue the checkpoints in {root} (run.backend=local wrote "
        "them, and Ray Train would start again at step 1); resume with --set run.backend=local"
    )


def console_writer(console: Console) -> Callable[[str], None]:
    """Writes the in-process loop's lines as Ray's forwarded worker lines are: around a live display."""

    def say(line: str) -> None:
        with console.external_output():
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    return say
