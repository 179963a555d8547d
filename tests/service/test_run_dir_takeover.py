"""A run directory whose run never took a step holds nothing: the same command starts afresh there
(the attempt's records removed, one line said); one whose run took a step is sent to `--resume`
with the command that does it; `--resume` with the preset and --set that started the run is
accepted, another preset or value refused naming the key."""

from __future__ import annotations

import json

import pytest

from service.config import ConfigError
from service.run_dir import claim_run, fresh_config, prepare_run_dir, resumed_config
from service.train import main as train_main

SETS = ["grpo.steps=3", "run.name=takeover"]


def _attempt(run_dir, *, stepped: bool) -> None:
    """What a driver leaves when it dies after writing its config: with a summary of 0 steps and a
    report (a run that failed before its first step), or a step's record too."""
    prepare_run_dir(fresh_config("smoke", None, SETS, str(run_dir)))
    (run_dir / "summary.json").write_text(json.dumps({"status": "failed", "steps": 0}))
    (run_dir / "report.png").write_bytes(b"png")
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "phase": "sft"}\n' if stepped else "")


def test_a_run_that_never_took_a_step_does_not_hold_its_directory(tmp_path):
    run_dir = tmp_path / "run"
    _attempt(run_dir, stepped=False)
    cfg = fresh_config("smoke", None, SETS, str(run_dir))
    lines: list[str] = []
    with claim_run(cfg, resume=False, log=lines.append):
        left = sorted(p.name for p in run_dir.iterdir() if not p.name.startswith("."))
    assert left == ["checkpoints", "config.yaml"]  # the attempt's records are gone
    assert lines == [f"run.run_dir: '{run_dir}' held a run that never took a step (no metrics, no checkpoint); "
                     "starting afresh there"]  # fmt: skip


def test_a_run_that_took_a_step_is_sent_to_resume_with_the_command_that_does_it(tmp_path, capsys):
    run_dir = tmp_path / "run"
    _attempt(run_dir, stepped=True)
    argv = [
        "--preset",
        "smoke",
        "--run-dir",
        str(run_dir),
        "--set",
        "grpo.steps=3",
        "--set",
        "run.name=takeover",
    ]
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds a run; pass --resume to continue it (" in err
    assert f"(python -m service.train {' '.join(argv)} --resume)" in err


def test_resume_takes_the_command_that_started_the_run_and_names_a_key_that_differs(tmp_path):
    run_dir = tmp_path / "run"
    _attempt(run_dir, stepped=True)
    saved = resumed_config(None, [], str(run_dir))
    assert resumed_config(None, SETS, str(run_dir), preset="smoke") == saved
    with pytest.raises(ConfigError) as other_value:
        resumed_config(None, ["run.name=takeover"], str(run_dir), preset="smoke")
    assert str(other_value.value).startswith(
        f"--preset smoke: gives grpo.steps=4, but the run in '{run_dir}' was saved with grpo.steps=3;"
    )
    with pytest.raises(ConfigError, match=r"^--preset move-smoke: gives sampling\.max_new_tokens=8, "):
        resumed_config(None, SETS, str(run_dir), preset="move-smoke")
    longer = resumed_config(None, ["grpo.steps=8", "run.name=takeover"], str(run_dir), preset="smoke")
    assert longer.grpo.steps == 8  # the same --set on both sides: a run trained longer
