"""Crash-safe checkpoints: `dir_root/step_000123/` appears complete or not at all.

A checkpoint directory holds
- `<name>.safetensors` for each weight dict of the trainer state (`model`, `ref_model`); tensors
  that share memory (tied embeddings) are stored once and the alias is recorded in the manifest;
- `state.pt`: everything else of the trainer state (optimiser, scaler, RNG states, counters),
  read back with `torch.load(weights_only=True)`, so loading never runs pickled code;
- `config.json` (the trainer state's `config`), `extra.json` (the caller's: data position, ...);
- `manifest.json`, written last: step, and size + sha256 of every file, checked on load.

Files go to a temporary directory beside the final one, are fsynced, and the directory is renamed
into place. One writer per `dir_root` (rank 0).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import Tensor

log = logging.getLogger(__name__)

WEIGHT_KEYS = ("model", "ref_model")
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step_(\d+)$")
_TMP_PREFIX = ".tmp-"


class CheckpointError(RuntimeError):
    """A checkpoint directory is incomplete or does not match its manifest."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written to its storage (disk full, permission denied, path gone)."""


def write_failure_message(what: str, where: str, why: str, last_good: str | None) -> str:
    """One line for a storage failure: what could not be written, where, why, and what the run does
    (it stops: a run never trains on without checkpoints)."""
    return (
        f"{what} could not be written to {where} ({why}); the run stops rather than train on without "
        f"checkpoints; the last good checkpoint is {last_good or 'none'}: fix the storage, then "
        "continue with --resume"
    )


def step_dir_name(step: int) -> str:
    return f"step_{step:06d}"


def _split_ties(weights: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Unique CPU tensors to store, and {alias: stored name} for exact aliases (tied weights)."""
    unique: dict[str, Tensor] = {}
    ties: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    for name, t in weights.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"weight {name!r} must be a tensor, got {type(t).__name__}")
        key = (
            t.device,
            t.untyped_storage().data_ptr(),
            t.storage_offset(),
            tuple(t.shape),
            t.stride(),
            t.dtype,
        )
        if t.numel() > 0 and key in seen:
            ties[name] = seen[key]
            continue
        seen[key] = name
        # clone: a partial overlap with another tensor's memory would make safetensors refuse the file
        unique[name] = t.detach().to("cpu", copy=True).contiguous()
    return unique, ties


def _fsync_write(path: Path, data: bytes) -> dict[str, Any]:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _serialise(trainer_state: dict, extra: dict) -> tuple[dict[str, bytes], dict[str, dict[str, str]]]:
    """{file name: bytes} of a checkpoint, and the tie map of each weight file."""
    files: dict[str, bytes] = {}
    ties: dict[str, dict[str, str]] = {}
    rest = {}
    for key, value in trainer_state.items():
        if key in WEIGHT_KEYS and value is not None:
            unique, ties[key] = _split_ties(value)
            files[f"{key}.safetensors"] = safetensors.torch.save(unique)
        elif key != "config":
            rest[key] = value
    buf = io.BytesIO()
    torch.save(rest, buf)
    files["state.pt"] = buf.getvalue()
    files["config.json"] = json.dumps(trainer_state.get("config", {}), indent=2, sort_keys=True).encode()
    files["extra.json"] = json.dumps(extra, indent=2, sort_keys=True).encode()
    return files, ties


def save_checkpoint(
    dir_root: str | os.PathLike, step: int, trainer_state: dict, extra: dict, keep_last: int = 3
) -> Path:
    """Write `dir_root/step_<step>/` atomically, then keep only the newest `keep_last`; returns the path.

    extra must be JSON-serialisable (e.g. the data position). A checkpoint of the same step is
    replaced.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    root = Path(dir_root)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(f"{_TMP_PREFIX}*"):  # left by a save that crashed half-way
        shutil.rmtree(stale, ignore_errors=True)
    files, ties = _serialise(trainer_state, extra)
    final = root / step_dir_name(step)
    tmp = root / f"{_TMP_PREFIX}{final.name}-{os.getpid()}"
    tmp.mkdir()
    manifest: dict[str, Any] = {"format": FORMAT_VERSION, "step": step, "files": {}, "ties": ties}
    for name, data in files.items():
        manifest["files"][name] = _fsync_write(tmp / name, data)
    _fsync_write(tmp / "manifest.json", json.dumps(manifest, indent=2).encode())
    _fsync_dir(tmp)
    if final.exists():
        old = root / f"{_TMP_PREFIX}replaced-{final.name}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    _prune(root, keep_last)
    return final


def list_checkpoints(dir_root: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of every `step_*` directory, newest first."""
    root = Path(dir_root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found, reverse=True)


def _prune(root: Path, keep_last: int) -> None:
    for _, path in list_checkpoints(root)[keep_last:]:
        shutil.rmtree(path, ignore_errors=True)


def _read_verified(path: Path, name: str, expected: dict[str, Any]) -> bytes:
    file = path / name
    if not file.is_file():
        raise CheckpointError(f"{name} is missing")
    data = file.read_bytes()
    if len(data) != expected["size"]:
        raise CheckpointError(f"{name} has {len(data)} bytes, manifest says {expected['size']}")
    if hashlib.sha256(data).hexdigest() != expected["sha256"]:
        raise CheckpointError(f"{name} does not match its sha256 in the manifest")
    return data


def load_checkpoint(path: str | os.PathLike) -> tuple[dict, dict]:
    """(trainer_state, extra) of one checkpoint directory, every file checked against the manifest.

    Tied weights come back as one tensor under both names, so `load_state_dict` restores both.
    Raises CheckpointError (or the parser's error) when anything is missing or corrupt.
    """
    path = Path(path)
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except FileNotFoundError:
        raise CheckpointError("manifest.json is missing (the save did not finish)") from None
    if manifest.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"unknown checkpoint format {manifest.get('format')!r}")
    blobs = {name: _read_verified(path, name, meta) for name, meta in manifest["files"].items()}
    state = torch.load(io.BytesIO(blobs["state.pt"]), map_location="cpu", weights_only=True)
    for key in WEIGHT_KEYS:
        data = blobs.get(f"{key}.safetensors")
        if data is None:
            continue
        weights = safetensors.torch.load(data)
        for alias, stored in manifest["ties"].get(key, {}).items():
            weights[alias] = weights[stored]
        state[key] = weights
    state["config"] = json.loads(blobs["config.json"])
    return state, json.loads(blobs["extra.json"])


def load_latest(dir_root: str | os.PathLike) -> tuple[dict, int] | None:
    """The newest checkpoint that loads: ({"trainer": trainer_state, "extra": extra}, step), or None.

    A checkpoint that fails to load (truncated, corrupt, incomplete) is reported with
    `logging.warning` (path and reason) and the previous one is tried.
    """
    for step, path in list_checkpoints(dir_root):
        try:
            trainer_state, extra = load_checkpoint(path)
        except Exception as exc:  # any failure to read means: fall back to an older one
            log.warning(
                "checkpoint %s cannot be loaded (%s: %s); trying the previous one",
                path,
                type(exc).__name__,
                exc,
            )
            continue
        return {"trainer": trainer_state, "extra": extra}, step
    return None
