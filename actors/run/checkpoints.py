"""A rank's checkpoints through its run context: write, check, name a storage failure, restore.

Rank 0 writes the trainer state to a staging directory and hands it to the context, which keeps
it as `<checkpoint root>/step_<N>` (Ray Train persists it; the local context copies it into
place). A checkpoint the context accepted must then be on the storage, whole; any failure of the
storage stops the run with one line saying what, where, why and the last good checkpoint (see
docs/guides/faults.md, "What survives what").
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from actors.run.context import RunContext
from trainer.checkpoint import (
    CheckpointWriteError,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    step_dir_name,
    write_failure_message,
)

log = logging.getLogger(__name__)


class CheckpointWriter:
    """Rank 0's checkpoint writes; `last_good` is the newest one known to be on the storage."""

    def __init__(self, context: RunContext, storage: str | None, last_good: str | None = None):
        self.context = context
        self.storage = storage  # where the context keeps checkpoints (checked after each one)
        self.last_good = last_good

    def write(self, step: int, state: dict, extra: dict, metrics: dict[str, Any]) -> None:
        """Keep `state` as checkpoint `step_<step>`; raises CheckpointWriteError naming the failure."""
        staging = None
        try:
            staging = Path(tempfile.mkdtemp(prefix="grpo-ckpt-"))
            path = save_checkpoint(staging, step, state, extra, keep_last=1)
            self.context.report(metrics, checkpoint_dir=path, name=step_dir_name(step))
            self._check_persisted(step)
        except CheckpointWriteError:
            raise
        except Exception as exc:  # the storage failed: say so and stop
            # Ray may wrap the OS error, or only find its storage marker gone: then ask the OS directly.
            cause = _os_error_in(exc)
            why = f"{type(cause).__name__}: {cause}" if cause else _storage_problem(self.storage)
            what = " ".join((why or f"{type(exc).__name__}: {exc}").split())[:600]  # one line
            raise CheckpointWriteError(self._failure(step, what)) from exc
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        self.last_good = step_dir_name(step)

    def _check_persisted(self, step: int) -> None:
        """A checkpoint the context accepted must be on the storage, whole: never silently missing."""
        if self.storage is None:
            return
        manifest = Path(self.storage) / step_dir_name(step) / "manifest.json"
        if not manifest.is_file():
            raise CheckpointWriteError(self._failure(step, f"{manifest} is missing after the write"))

    def _failure(self, step: int, why: str) -> str:
        where = self.storage or "Ray Train's storage"
        return write_failure_message(f"checkpoint {step_dir_name(step)}", where, why, self.last_good)


def _storage_problem(directory: str | None) -> str | None:
    """What the OS answers when a file is created in `directory` (None: it can be, or no directory)."""
    if directory is None:
        return None
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-check-"):
            pass
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _os_error_in(exc: BaseException) -> OSError | None:
    """The innermost OSError in an exception's chain of causes, if any (disk full, permission, ...)."""
    found, seen = None, set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError):
            found = exc
        exc = exc.__cause__ or exc.__context__
    return found


def load_verified(path: Path) -> tuple[dict, dict]:
    """(trainer_state, extra) of a checkpoint directory, falling back to older `step_*` siblings
    when it does not match its manifest (a copy cut short, a corrupt file)."""
    try:
        return load_checkpoint(path)
    except Exception as exc:
        log.warning(
            "checkpoint %s cannot be loaded (%s: %s); trying older ones", path, type(exc).__name__, exc
        )
        failure = exc
    for _, older in list_checkpoints(path.parent):
        if older.name >= path.name:
            continue
        try:
            return load_checkpoint(older)
        except Exception as exc:  # keep looking further back
            log.warning("checkpoint %s cannot be loaded either (%s)", older, exc)
    raise RuntimeError(f"no loadable checkpoint at or before {path}: {failure}") from failure
