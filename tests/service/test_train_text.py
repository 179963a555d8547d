"""`python -m service.train` on the `text` task end to end: JSONL rows, a reward taking row fields
by name in the reward pool's workers, a stop string, and pass@k at the start and final evaluations."""

from __future__ import annotations

import json

import pytest

from examples.addition.make_data import make, write_jsonl
from examples.addition.reward import addition_reward
from service.run_files import read_jsonl
from tests.service.train_child import assert_ran, run_train, shared_env

pytestmark = pytest.mark.slow


def test_text_run_trains_scores_fields_and_reports_pass_at_k(tmp_path):
    train, held = make(seed=3, digits=2, train=400, held_out=16)
    write_jsonl(tmp_path / "train.jsonl", train)
    write_jsonl(tmp_path / "eval.jsonl", held)
    run_dir = tmp_path / "run"
    sets = [
        "task.name=text",
        f"task.path={tmp_path / 'train.jsonl'}",
        f"task.eval_path={tmp_path / 'eval.jsonl'}",
        "task.stop=['+']",
        "reward.user=[{fn: 'examples.addition.reward:addition_reward'}]",
        "model.block_size=32",
        "sampling.max_new_tokens=6",
        "grpo.eval_k=2",
        "run.backend=local",  # the loop in process: the same records without Ray Train's start-up
        "logging.rollouts_every=2",
    ]
    result = assert_ran(
        run_train("--preset", "smoke", "--run-dir", str(run_dir), sets=sets, env=shared_env())
    )
    assert "[data] " in result.stdout and "400 training rows" in result.stdout

    evals = read_jsonl(run_dir / "eval.jsonl")
    sampled = [e for e in evals if e["kind"] in ("start", "final")]
    assert len(sampled) == 2 and all(e["k"] == 2 for e in sampled)
    for e in evals:
        assert e["count"] == 16 and e["valid_rate"] == 1.0  # the reward never fails on these rows
        assert 0.0 <= e["reward_mean"] <= 1.0 and e["exact_match"] is not None
        assert e["reward_components"] == {"examples.addition.reward:addition_reward": e["reward_mean"]}
        assert all("+" not in s["completion"] for s in e["samples"])  # the stop string ends them
    for e in sampled:
        assert 0.0 <= e["pass_at_1"] <= e["pass_at_k"] <= 1.0 and 0.0 <= e["mean_at_k"] <= 1.0
    for e in (e for e in evals if e["kind"] == "periodic"):
        assert "pass_at_k" not in e

    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if m["phase"] == "grpo"]
    assert metrics and all(m["reward_ok_frac"] == 1.0 for m in metrics)  # the fields reached the workers
    for m in metrics:  # one user reward of weight 1 on every item: its mean is the reward's mean
        assert list(m["reward_components"]) == ["examples.addition.reward:addition_reward"]
        assert m["reward_components"]["examples.addition.reward:addition_reward"] == pytest.approx(
            m["reward_mean"]
        )
    rollouts = read_jsonl(run_dir / "rollouts.jsonl")  # GRPO steps 1 and 3: every group of 4 prompts x 4
    recorded = [m["step"] for m in metrics][::2]
    assert [r["step"] for r in rollouts] == [s for s in recorded for _ in range(16)]
    prompts = {row["prompt"] for row in train}
    for r in rollouts:
        assert r["prompt"] in prompts and "+" not in r["completion"] and r["status"] == "ok"
        assert 0.0 <= r["reward"] <= 1.0 and 1 <= r["tokens"] <= 6
        a, b = map(int, r["prompt"].removesuffix("=").split("+"))  # the text that was scored
        assert r["reward"] == addition_reward(r["completion"].strip(), a, b), r
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["final_eval"]["k"] == 2
