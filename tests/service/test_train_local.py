"""`run.backend: local`: the one rank's loop in the driver process, no Ray Train.

The whole smoke run with each backend, same seed, gives the same records (only timings differ);
a local run continues from its own checkpoint with `--resume`; a failing local loop ends the run
`failed` with the worker's reason, as under Ray Train. The config refuses a local run of more
than one rank, and Ray Train refuses checkpoints only a local run can continue.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from service.config import ConfigError, load_config
from service.run_files import read_jsonl
from tests.service.record_diff import record_differences
from tests.service.train_child import assert_ran, run_train, shared_env
from trainer.schedule import Schedule


def _train(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    result = run_train(*args, env=shared_env(), timeout=300)
    return result, time.monotonic() - began


def _smoke(run_dir: Path, backend: str, *more: str) -> Path:
    result, wall = _train(
        "--preset", "smoke", "--run-dir", str(run_dir), "--set", f"run.backend={backend}", *more
    )
    assert_ran(result)
    print(f"smoke run, run.backend={backend}: {wall:.1f}s wall")
    return run_dir


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("backends")
    return {backend: _smoke(root / backend, backend) for backend in ("local", "ray_train")}


@pytest.mark.e2e
@pytest.mark.slow
def test_local_and_ray_train_runs_give_the_same_records(smoke_runs):
    for name in ("metrics.jsonl", "eval.jsonl"):
        local, ray_train = (read_jsonl(smoke_runs[b] / name) for b in ("local", "ray_train"))
        assert [r["step"] for r in local] == [r["step"] for r in ray_train] and local
        assert record_differences(local, ray_train, name) == []
    summaries = {b: json.loads((smoke_runs[b] / "summary.json").read_text()) for b in smoke_runs}
    assert summaries["local"]["status"] == summaries["ray_train"]["status"] == "succeeded"
    assert summaries["local"]["last_checkpoint"] == summaries["ray_train"]["last_checkpoint"]
    local_root, ray_root = (smoke_runs[b] / "checkpoints" for b in ("local", "ray_train"))
    assert sorted(p.name for p in local_root.glob("step_*")) == sorted(
        p.name for p in ray_root.glob("step_*")
    )
    assert not list(local_root.glob(".*"))  # no temporary copy left, and no Ray Train files


@pytest.mark.e2e
@pytest.mark.slow
def test_a_local_run_resumes_from_its_checkpoint_with_more_steps(smoke_runs, tmp_path):
    run_dir = tmp_path / "resumed"
    shutil.copytree(smoke_runs["local"], run_dir)
    done = json.loads((run_dir / "summary.json").read_text())["steps"]
    grpo = load_config("smoke").grpo.steps
    result, _ = _train("--run-dir", str(run_dir), "--resume", "--set", f"grpo.steps={grpo + 2}")
    assert_ran(result)
    assert f"resuming from the checkpoint of step {done}" in result.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["resumed_from"] == done
    assert summary["steps"] == done + 2 and summary["last_checkpoint"] == f"step_{done + 2:06d}"
    assert [row["step"] for row in read_jsonl(run_dir / "metrics.jsonl")] == list(range(1, done + 3))
    keep = load_config("smoke").checkpoint.keep_last
    steps = sorted(int(p.name.removeprefix("step_")) for p in (run_dir / "checkpoints").glob("step_*"))
    assert steps[-1] == done + 2 and len(steps) <= keep


@pytest.mark.e2e
@pytest.mark.slow
def test_a_failing_local_loop_ends_the_run_failed_with_its_reason(tmp_path):
    run_dir = tmp_path / "failed"
    reward = "reward.user=[{fn: 'examples.rewards.misbehaving:breaks_after_calls'}]"  # at the first GRPO step
    result, _ = _train(
        "--preset", "smoke", "--run-dir", str(run_dir), "--set", "run.backend=local", "--set", reward
    )
    assert result.returncode == 1, (result.stdout + result.stderr)[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["steps"] == _first_grpo_step("smoke")
    assert "pool.error_rate_threshold" in summary["error"] and "\n" not in summary["error"]


def _first_grpo_step(preset: str) -> int:
    schedule = Schedule.of(load_config(preset))
    return next(step for step in range(1, schedule.total + 1) if schedule.phase_of(step) == "grpo")


def test_a_local_run_has_one_rank():
    with pytest.raises(ConfigError) as caught:
        load_config("smoke", overrides=["run.backend=local", "scaling.num_workers=2"])
    assert str(caught.value).startswith("run.backend: 'local'") and "scaling.num_workers=1" in str(
        caught.value
    )
    with pytest.raises(ConfigError, match="run.backend: 'threads' is not allowed; expected one of"):
        load_config("smoke", overrides=["run.backend=threads"])
    assert load_config("smoke").run.backend == "ray_train"


def test_a_local_loop_failure_is_worded_as_a_ray_train_worker_failure():
    from actors.run.loop import LoopFailed
    from service.driver import failure_reason

    assert failure_reason(LoopFailed(ValueError("first\nlast  line"))) == "worker 0: ValueError: last line"


def test_ray_train_refuses_checkpoints_only_a_local_run_can_continue(tmp_path):
    from service.run_backend import RAY_TRAIN_MARKER, local_checkpoints_problem

    root = tmp_path / "checkpoints"
    assert local_checkpoints_problem(root) is None  # a fresh run
    (root / "step_000004").mkdir(parents=True)
    problem = local_checkpoints_problem(root)
    assert problem.startswith("run.backend: 'ray_train' cannot continue") and "run.backend=local" in problem
    (root / RAY_TRAIN_MARKER).write_text("")  # Ray Train ran here: it resumes from what it registered
    assert local_checkpoints_problem(root) is None


def _rewrite_runtime(checkpoint: Path, **choices: object) -> dict:
    """Give a checkpoint another runtime record (as if another machine had written it), its manifest
    updated to match; returns the record."""
    import hashlib

    extra = json.loads((checkpoint / "extra.json").read_text())
    extra["runtime"] = {**extra["runtime"], **choices}
    data = json.dumps(extra, indent=2, sort_keys=True).encode()
    (checkpoint / "extra.json").write_bytes(data)
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    manifest["files"]["extra.json"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return extra["runtime"]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_resumed_run_computes_with_the_choices_of_the_run_it_continues(smoke_runs, tmp_path):
    """What `auto` became comes from the checkpoint, not from this machine choosing again."""
    run_dir = tmp_path / "resumed"
    shutil.copytree(smoke_runs["local"], run_dir)
    first = json.loads((run_dir / "runtime.json").read_text())
    done = json.loads((run_dir / "summary.json").read_text())["steps"]
    other = {"fp32": "bf16", "bf16": "fp32"}[first["precision"]]
    kernel = {"torch": "onednn", "onednn": "torch"}[first["linear_kernel"]]
    kept = _rewrite_runtime(
        run_dir / "checkpoints" / f"step_{done:06d}",
        precision=other, precision_reason="auto: another machine's reason", sampling_precision=other,
        linear_kernel=kernel, torch_threads=1, sampling_threads=1,
    )  # fmt: skip
    grpo = load_config("smoke").grpo.steps
    result, _ = _train("--run-dir", str(run_dir), "--resume", "--set", f"grpo.steps={grpo + 1}")
    assert_ran(result)
    runtime = json.loads((run_dir / "runtime.json").read_text())
    assert (runtime["precision"], runtime["sampling_precision"], runtime["linear_kernel"]) == (
        other,
        other,
        kernel,
    )
    assert (
        runtime["precision_reason"] == "auto: another machine's reason" and runtime["kept_from_step"] == done
    )
    assert (runtime["torch_threads"], runtime["sampling_threads"]) == (1, 1)
    newest = json.loads((run_dir / "checkpoints" / f"step_{done + 1:06d}" / "extra.json").read_text())
    assert {k: newest["runtime"][k] for k in ("precision", "linear_kernel", "torch_threads")} == {
        k: kept[k] for k in ("precision", "linear_kernel", "torch_threads")
    }  # and the next resume keeps them again
