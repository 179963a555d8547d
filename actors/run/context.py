"""The run context a rank's loop talks to: who it is, where it computes, how it reports and checkpoints.

    context.rank, context.world_size, context.local_world_size, context.device
    context.report(metrics, checkpoint_dir=None, name=None)  # a barrier across the ranks
    context.latest_checkpoint()                              # Restore(path, name) or None
    context.say(line)                                        # a line for the run's console

Two implementations, one layout: every checkpoint lands in `<checkpoint root>/step_<N>` (the
run's `checkpoints/`), so `--resume` finds it whichever backend wrote it.
- `RayTrainContext` (`actors.run.ray_context`): one per Ray Train worker; Ray Train persists,
  registers and prunes the checkpoints (`CheckpointConfig(num_to_keep)`).
- `LocalContext` (here, no Ray): the one process of a `run.backend: local` run, world 1; it copies
  a checkpoint into place itself, atomically, and prunes to `checkpoint.keep_last`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch

from trainer.checkpoint import list_checkpoints

TMP_PREFIX = ".tmp-"  # as trainer.checkpoint's: a copy cut short is never taken for a checkpoint


class Restore(NamedTuple):
    """The checkpoint a run continues from."""

    path: Path  # the directory to load (an older sibling is tried when it does not load)
    name: str  # the step name the backend lists it under: `step_<N>`


class RunContext(Protocol):
    """What one rank's loop needs of the machinery running it."""

    rank: int
    world_size: int
    local_world_size: int  # ranks on this node (they share its cores)
    device: torch.device

    def report(
        self, metrics: dict[str, Any], checkpoint_dir: Path | None = None, name: str | None = None
    ) -> None:
        """Every rank calls it at the same point; rank 0 hands over a checkpoint directory to keep
        as `name` (the directory is the caller's: it may be deleted after the call)."""

    def latest_checkpoint(self) -> Restore | None:
        """The newest checkpoint of this run, or None when it starts afresh."""

    def say(self, line: str) -> None:
        """One line for the run's console (rank 0's placement notes, ...)."""


def local_device(use_gpu: bool) -> torch.device:
    """The device of a one-process run: the current CUDA device with `scaling.use_gpu`, else the CPU."""
    if not use_gpu:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(
            "scaling.use_gpu is true but this process sees no CUDA device "
            "(run.backend: local trains in the driver process)"
        )
    return torch.device("cuda", torch.cuda.current_device())


def _stdout_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class LocalContext:
    """One process, world 1, rank 0: the loop runs in the caller's process, no Ray Train."""

    rank = 0
    world_size = 1
    local_world_size = 1

    def __init__(
        self,
        root: str | os.PathLike,
        keep_last: int,
        device: torch.device | None = None,
        say: Callable[[str], None] | None = None,
    ):
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        self.root = Path(root)
        self.keep_last = keep_last
        self.device = device if device is not None else torch.device("cpu")
        self._say = say or _stdout_line

    def report(
        self, metrics: dict[str, Any], checkpoint_dir: Path | None = None, name: str | None = None
    ) -> None:
        # One rank: no barrier to wait at, and no one reads the metrics (the control actor has them).
        if checkpoint_dir is None:
            return
        if not name:
            raise ValueError("a checkpoint needs the name it is kept under (step_<N>)")
        install_checkpoint(Path(checkpoint_dir), self.root, name, self.keep_last)

    def latest_checkpoint(self) -> Restore | None:
        found = list_checkpoints(self.root)  # newest step first
        if not found:
            return None
        path = found[0][1]
        return Restore(path, path.name)

    def say(self, line: str) -> None:
        self._say(line)


def install_checkpoint(source: Path, root: Path, name: str, keep_last: int) -> Path:
    """Copy `source` to `root/name` so that it appears whole or not at all, then keep the newest
    `keep_last` `step_*` directories; returns the new directory.

    The copy goes to a temporary directory beside the final one (same filesystem), is fsynced,
    and is renamed into place: a crash leaves either the old state or the new one.
    """
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(f"{TMP_PREFIX}*"):  # left by a copy that crashed half-way
        shutil.rmtree(stale, ignore_errors=True)
    final = root / name
    tmp = root / f"{TMP_PREFIX}{name}-{os.getpid()}"
    try:
        shutil.copytree(source, tmp)
        _fsync_tree(tmp)
        if final.exists():  # the same step again: swap, so there is never a moment without it
            old = root / f"{TMP_PREFIX}replaced-{name}-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for _, older in list_checkpoints(root)[keep_last:]:
        shutil.rmtree(older, ignore_errors=True)
    return final


def _fsync_tree(directory: Path) -> None:
    for path in sorted(directory.rglob("*"), reverse=True):  # files before the directories holding them
        _fsync(path)
    _fsync(directory)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
