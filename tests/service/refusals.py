"""A run refused before anything starts: exit 2, one line on stderr, no run directory."""

from __future__ import annotations

from pathlib import Path

from service.train import main as train_main


def refused(capsys, tmp_path: Path, preset: str, *sets: str) -> str:
    """`python -m service.train --preset PRESET --set ...` run in process: its one line of refusal."""
    run_dir = tmp_path / "run"
    argv = ["--preset", preset, "--run-dir", str(run_dir)]
    for item in sets:
        argv += ["--set", item]
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("config error: "), err
    assert not run_dir.exists()
    return err
