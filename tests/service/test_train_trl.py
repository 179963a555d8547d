"""Whole runs of the text task scored by rewards written for TRL (one call per chunk, lists in, a
list of floats out) in the reward pool's workers: one on the completions' text, one of TRL's own on
their token ids."""

from __future__ import annotations

import json
import random

import pytest

from service.run_files import read_jsonl
from tests.service.train_child import assert_ran, run_train, shared_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def run_text_task(tmp_path, reward: str):
    """A smoke run of the text task (reverse short words) with one user reward; its run directory."""
    rng = random.Random(0)
    words = {"".join(rng.choice("abcd") for _ in range(rng.randint(2, 4))) for _ in range(200)}
    rows = [{"prompt": w + "=", "target": w[::-1]} for w in sorted(words)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_dir = tmp_path / "run"
    sets = [
        "task.name=text",
        f"task.path={tmp_path / 'train.jsonl'}",
        f"reward.user=[{{fn: '{reward}'}}]",
        "data.eval_size=8",
        "model.block_size=16",
        "sampling.max_new_tokens=5",
        "run.backend=local",
        "logging.rollouts_every=1",
    ]
    result = assert_ran(
        run_train("--preset", "smoke", "--run-dir", str(run_dir), sets=sets, env=shared_env())
    )
    assert "run on the pool" in result.stdout  # scored in the pool's workers, not in process
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "succeeded"
    return run_dir


def test_a_trl_style_reward_scores_a_run_through_the_pool(tmp_path):
    run_dir = run_text_task(tmp_path, "examples.rewards.trl_verl:reverse_reward")
    grpo = [m for m in read_jsonl(run_dir / "metrics.jsonl") if m["phase"] == "grpo"]
    assert grpo and all(0.0 <= m["reward_mean"] <= 1.0 for m in grpo)
    # what the reward logged with TRL's log_metric, as the step's mean over its calls
    assert all(0.0 <= m["reward_metrics"]["reversed_exactly"] <= 1.0 for m in grpo)
    # and what it logged with log_extra, beside each recorded completion
    rows = read_jsonl(run_dir / "rollouts.jsonl")  # one per recorded completion
    assert rows and all(r["log_extra"] == {"expected": r["prompt"][::-1]} for r in rows)
    evals = read_jsonl(run_dir / "eval.jsonl")
    assert evals and all(e["valid_rate"] == 1.0 for e in evals)  # every item scored by the TRL call


def test_trls_own_reward_on_completion_ids_gets_the_sampled_token_ids(tmp_path):
    pytest.importorskip("trl.rewards")
    run_dir = run_text_task(tmp_path, "examples.rewards.trl_token_ids:overlong")
    grpo = [m for m in read_jsonl(run_dir / "metrics.jsonl") if m["phase"] == "grpo"]
    # reversed words of 2-4 letters and EOS: 3-5 token ids, so the punishment is -0.5 or -1 mostly
    assert grpo and all(-1.0 <= m["reward_mean"] <= 0.0 for m in grpo)
    assert any(m["reward_mean"] < 0 for m in grpo)
    evals = read_jsonl(run_dir / "eval.jsonl")
    assert evals and all(e["valid_rate"] == 1.0 for e in evals)  # every item had its ids: none `error`
