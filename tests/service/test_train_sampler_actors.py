"""Whole runs with sampler actors (`sampling.placement: actors`): at grpo.max_staleness 0 a run
writes the records and the checkpoint bytes the same run writes sampling in its trainer (built-in
policy, transformers policy, LoRA adapter); at 1 it trains and records each step's policy version,
staleness and importance weights; what cannot run with sampler actors is refused in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from service.run_files import read_jsonl
from tests.service.record_diff import record_differences
from tests.service.train_child import assert_ran, run_train, shared_env
from trainer.checkpoint import load_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
SAME_BYTES = ("model.safetensors", "ref_model.safetensors", "state.pt")  # weights, optimiser, RNG, counters
# Scored on the pool either way (pool.placement auto would score some steps in the trainer, whose
# records then lack the pool's counts); fp32 whatever the CPU.
COMMON = ("run.backend=local", "pool.placement=pool", "precision.dtype=fp32")


def _train(run_dir: Path, preset: str, *sets: str) -> subprocess.CompletedProcess:
    return assert_ran(
        run_train("--preset", preset, "--run-dir", str(run_dir), sets=(*COMMON, *sets), env=shared_env())
    )


def _last_checkpoint(run_dir: Path) -> Path:
    return run_dir / "checkpoints" / json.loads((run_dir / "summary.json").read_text())["last_checkpoint"]


def _same_run(trainer: Path, actors: Path) -> None:
    for name in ("metrics.jsonl", "eval.jsonl"):
        ours, theirs = read_jsonl(trainer / name), read_jsonl(actors / name)
        assert ours and record_differences(ours, theirs, name) == []
    a, b = _last_checkpoint(trainer), _last_checkpoint(actors)
    assert a.name == b.name
    for name in SAME_BYTES:
        assert (a / name).exists() == (b / name).exists()
        if (a / name).exists():
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    config_a, config_b = (json.loads((d / "config.json").read_text()) for d in (a, b))
    assert (config_a["sampling"].pop("placement"), config_b["sampling"].pop("placement")) == (
        "trainer",
        "actors",
    )
    for config, run_dir in (
        (config_a, trainer),
        (config_b, actors),
    ):  # the tiny model made in each run directory
        path = config["model"].get("path")
        if path is not None and run_dir in Path(path).parents:
            config["model"]["path"] = str(Path(path).relative_to(run_dir))
    assert config_a == config_b
    extra_a, extra_b = (json.loads((d / "extra.json").read_text()) for d in (a, b))
    assert extra_a.pop("run_id") != extra_b.pop("run_id") and extra_a == extra_b


@pytest.mark.parametrize(
    ("preset", "sets"),
    [("smoke", ()), ("hf-smoke", ()), ("hf-smoke", ("model.lora={r: 4}",))],
    ids=["builtin", "hf", "hf-lora"],
)
def test_actors_at_staleness_0_write_the_trainer_placements_records_and_checkpoint_bytes(
    tmp_path, preset, sets
):
    if preset == "hf-smoke":
        pytest.importorskip("transformers")
    if sets:
        pytest.importorskip("peft")
    _train(tmp_path / "trainer", preset, *sets)
    _train(tmp_path / "actors", preset, *sets, "sampling.placement=actors")
    _same_run(tmp_path / "trainer", tmp_path / "actors")


def test_a_run_at_staleness_1_records_the_lag_and_its_importance_weights(tmp_path):
    run_dir = tmp_path / "stale"
    _train(run_dir, "smoke", "sampling.placement=actors", "grpo.max_staleness=1", "grpo.policy_loss=tis")
    grpo = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["phase"] == "grpo"]
    assert [(r["policy_version"], r["staleness"]) for r in grpo] == [(0, 0), (0, 1), (1, 1), (2, 1)]
    for r in grpo:
        assert 0 < r["is_weight_mean"] <= r["is_weight_max"] <= 2.0 and 0 <= r["is_clip_frac"] <= 1
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "succeeded"
    state, _ = load_checkpoint(_last_checkpoint(run_dir))
    assert "sampling" not in state  # the last step requests nothing ahead: nothing on its way


def test_an_environment_task_with_sampler_actors_is_refused_before_the_run_in_one_line(tmp_path):
    result = run_train(
        "--preset", "env-smoke", "--run-dir", str(tmp_path / "env"),
        sets=("run.backend=local", "sampling.placement=actors"), env=shared_env(),
    )  # fmt: skip
    assert result.returncode == 2 and not (tmp_path / "env").exists()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "sampling.placement=actors samples single-turn tasks" in lines[0], (
        result.stderr
    )
