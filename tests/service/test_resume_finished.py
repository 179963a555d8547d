"""`--resume` on a run that already finished leaves it as it is: one line, exit 2, nothing written."""

from __future__ import annotations

import json

from service.config import config_to_yaml, load_config
from service.run_dir import resumed_config
from service.train import main


def _finished_run(tmp_path):
    run_dir = tmp_path / "done"
    run_dir.mkdir()
    cfg = load_config("smoke", overrides=["run.name=done", f"run.run_dir={run_dir}"])  # 6 SFT + 4 GRPO steps
    (run_dir / "config.yaml").write_text(config_to_yaml(cfg))
    summary = {
        "status": "succeeded",
        "steps": 10,
        "total_steps": 10,
        "wall_time_s": 17.07,
        "last_checkpoint": "step_000010",
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def test_resume_of_a_finished_run_changes_nothing(tmp_path, capsys):
    run_dir = _finished_run(tmp_path)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    assert main(["--resume", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already succeeded at step 10 of 10; nothing to do" in err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


def test_resume_to_train_longer_is_allowed(tmp_path):
    run_dir = _finished_run(tmp_path)
    cfg = resumed_config(None, ["grpo.steps=8"], str(run_dir))
    assert cfg.grpo.steps == 8 and cfg.run.name == "done"
