"""The local run context without Ray: its checkpoints land whole in `<root>/step_<N>`, the newest
`keep_last` stay, and the newest is what a resume loads."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from actors.run.checkpoints import CheckpointWriter
from actors.run.context import TMP_PREFIX, LocalContext, Restore, install_checkpoint, local_device
from trainer.checkpoint import (
    CheckpointWriteError,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    step_dir_name,
)


def _state(step: int) -> dict:
    return {"model": {"w": torch.full((3,), float(step))}, "steps": step, "config": {"seed": 1}}


def _staged(tmp_path: Path, step: int) -> Path:
    """A checkpoint as the loop stages it before handing it to the context."""
    return save_checkpoint(tmp_path / "staging" / str(step), step, _state(step), {"step": step}, keep_last=1)


def _steps(root: Path) -> list[int]:
    return sorted(step for step, _ in list_checkpoints(root))


def test_a_checkpoint_is_copied_into_the_ray_train_layout_and_loads(tmp_path):
    root = tmp_path / "run" / "checkpoints"
    context = LocalContext(root, keep_last=3)
    staged = _staged(tmp_path, 4)
    context.report({"step": 4}, checkpoint_dir=staged, name=step_dir_name(4))
    assert [p.name for p in root.iterdir()] == ["step_000004"]  # nothing else: no temporary left
    state, extra = load_checkpoint(root / "step_000004")
    assert torch.equal(state["model"]["w"], torch.full((3,), 4.0)) and extra == {"step": 4}
    assert staged.is_dir()  # the staging copy is the caller's to delete
    assert context.latest_checkpoint() == Restore(root / "step_000004", "step_000004")


def test_only_the_newest_keep_last_stay_and_the_newest_is_latest(tmp_path):
    root = tmp_path / "checkpoints"
    context = LocalContext(root, keep_last=2)
    assert context.latest_checkpoint() is None  # no directory yet: a fresh start
    for step in (2, 4, 9, 10):  # 10 after 9: newest by step, not by the name's characters
        context.report({"step": step}, checkpoint_dir=_staged(tmp_path, step), name=f"step_{step}")
    assert _steps(root) == [9, 10]
    assert context.latest_checkpoint() == Restore(root / "step_10", "step_10")


def test_reports_without_a_checkpoint_write_nothing(tmp_path):
    context = LocalContext(tmp_path / "checkpoints", keep_last=1)
    context.report({"step": 1})
    assert not (tmp_path / "checkpoints").exists() and context.latest_checkpoint() is None
    assert (context.rank, context.world_size, context.local_world_size) == (0, 1, 1)
    with pytest.raises(ValueError, match="name"):
        context.report({"step": 1}, checkpoint_dir=_staged(tmp_path, 1))
    with pytest.raises(ValueError, match="keep_last"):
        LocalContext(tmp_path, keep_last=0)


def test_the_same_step_again_replaces_it_whole(tmp_path):
    root = tmp_path / "checkpoints"
    first = _staged(tmp_path, 3)
    install_checkpoint(first, root, "step_000003", keep_last=2)
    other = save_checkpoint(tmp_path / "other", 3, _state(7), {"step": 3, "again": True}, keep_last=1)
    install_checkpoint(other, root, "step_000003", keep_last=2)
    state, extra = load_checkpoint(root / "step_000003")
    assert extra["again"] and float(state["model"]["w"][0]) == 7.0
    assert sorted(p.name for p in root.iterdir()) == ["step_000003"]


def test_a_copy_cut_short_leaves_no_checkpoint_and_is_cleared_by_the_next(tmp_path):
    root = tmp_path / "checkpoints"
    install_checkpoint(_staged(tmp_path, 1), root, "step_000001", keep_last=3)
    (root / f"{TMP_PREFIX}step_000002-999").mkdir()  # a crash half-way through a copy
    assert _steps(root) == [1]  # never taken for a checkpoint
    with pytest.raises(FileNotFoundError):
        install_checkpoint(tmp_path / "missing", root, "step_000003", keep_last=3)
    assert sorted(p.name for p in root.iterdir()) == ["step_000001"]  # stale and failed copies gone


def test_a_storage_that_refuses_the_write_stops_with_one_line(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    root = blocker / "checkpoints"
    writer = CheckpointWriter(LocalContext(root, keep_last=1), str(root), last_good="step_000002")
    with pytest.raises(CheckpointWriteError) as caught:
        writer.write(4, _state(4), {"step": 4}, {"step": 4})
    message = str(caught.value)
    assert "\n" not in message and "checkpoint step_000004 could not be written to" in message
    assert "NotADirectoryError" in message and "the last good checkpoint is step_000002" in message


def test_the_writer_keeps_the_checkpoint_and_removes_its_staging_copy(tmp_path, monkeypatch):
    staging = tmp_path / "tmp"
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))
    root = tmp_path / "checkpoints"
    writer = CheckpointWriter(LocalContext(root, keep_last=1), str(root))
    writer.write(5, _state(5), {"step": 5}, {"step": 5})
    assert writer.last_good == "step_000005" and _steps(root) == [5]
    assert list(staging.iterdir()) == []


def test_the_local_device_follows_use_gpu():
    assert local_device(False) == torch.device("cpu")
    if torch.cuda.is_available():
        assert local_device(True).type == "cuda"
    else:
        with pytest.raises(RuntimeError, match="scaling.use_gpu"):
            local_device(True)
