"""A run whose records would land inside a Ray job's unpacked working directory says so."""

from __future__ import annotations

from service.run_dir import ephemeral_dir_warning


def test_records_inside_a_ray_jobs_working_dir_are_warned_about(tmp_path):
    unpacked = tmp_path / "session_1" / "runtime_resources" / "working_dir_files" / "_ray_pkg_ab12"
    warning = ephemeral_dir_warning(unpacked / "runs" / "grpo-1")
    assert warning is not None and "run.storage_path" in warning and "\n" not in warning
    assert ephemeral_dir_warning(tmp_path / "runs" / "grpo-1") is None
