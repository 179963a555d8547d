"""`--preset env-smoke` end to end: episodes with the bundled `guess` environment on the reward
pool (SFT on its demonstrations first), the episode figures and whole transcripts in the records;
a multi-turn run stopped at a checkpoint and resumed gives the records of one that never stopped."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from service.run_files import read_jsonl
from tests.service.record_diff import record_differences
from tests.service.train_child import assert_ran, run_train, shared_env

# Enough warm start that the policy writes numbers, so episodes go on for several turns.
WARM = ("--set", "sft.steps=60", "--set", "sft.lr=0.01", "--set", "checkpoint.every_steps=2")
GRPO_STEPS = 4


def _train(run_dir: Path, *more: str) -> subprocess.CompletedProcess:
    args = ("--preset", "env-smoke", "--run-dir", str(run_dir), "--set", "run.backend=local", *WARM, *more)
    return assert_ran(run_train(*args, env=shared_env()))


@pytest.fixture(scope="module")
def env_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("env") / "run"
    _train(run_dir)
    return run_dir


@pytest.mark.e2e
@pytest.mark.slow
def test_env_smoke_plays_episodes_and_records_them(env_run):
    evals = read_jsonl(env_run / "eval.jsonl")
    assert [e["kind"] for e in evals] == ["start", "periodic", "final"]
    for e in evals:
        assert e["count"] == 8 and e["statuses"] and "env_error" not in e["statuses"]
        assert 0.0 <= e["success_rate"] <= 1.0 and e["turns_mean"] >= 1.0 and e["env_errors"] == 0.0
        for sample in e["samples"]:  # a whole transcript: guesses, each with its answer
            assert sample["prompt"] == "guess 1-16\n" and sample["status"] in ("ok", "max_tokens")
    assert max(e["turns_mean"] for e in evals) > 1.0, "no episode went past one turn: the run showed nothing"
    grpo = [m for m in read_jsonl(env_run / "metrics.jsonl") if m["phase"] == "grpo"]
    assert len(grpo) == GRPO_STEPS
    for m in grpo:
        assert m["completions"] == 16 and m["scorer_reward_items"] == 16 and m["env_errors"] == 0.0
        assert m["turns_mean"] >= 1.0 and m["env_step_s"] > 0 and m["pool_workers_alive"] == 1.0
        assert 0.0 <= m["env_metrics"]["guesses"] <= m["turns_mean"]  # GuessNumber's episode_info()
    summary = json.loads((env_run / "summary.json").read_text())
    assert summary["status"] == "succeeded" and "success_rate" in summary["final_eval"]
    report = (env_run / "report.html").read_text()
    assert 'data-field="held-out success"' in report and "<th>turns</th>" in report


@pytest.mark.e2e
@pytest.mark.slow
def test_a_resumed_multi_turn_run_repeats_one_that_never_stopped(env_run, tmp_path):
    run_dir = tmp_path / "resumed"
    _train(run_dir, "--set", f"grpo.steps={GRPO_STEPS - 2}")
    resume = ("--run-dir", str(run_dir), "--resume")
    result = assert_ran(run_train(*resume, sets=[f"grpo.steps={GRPO_STEPS}"], env=shared_env()))
    assert "resuming from the checkpoint of step" in result.stdout
    ours, theirs = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(env_run / "metrics.jsonl")
    assert record_differences(ours, theirs, "metrics.jsonl") == []
    drop_kind = [{k: v for k, v in e.items() if k != "kind"} for e in read_jsonl(run_dir / "eval.jsonl")]
    want = [{k: v for k, v in e.items() if k != "kind"} for e in read_jsonl(env_run / "eval.jsonl")]
    assert record_differences(drop_kind, want, "eval.jsonl") == []
    shutil.rmtree(run_dir)
