"""`python -m service.train --preset code-smoke` end to end: generated problems, completions run in the
sandbox by the reward pool, pass@1 in the held-out records."""

from __future__ import annotations

import json

import pytest

from service.run_files import read_jsonl
from tests.service.train_child import assert_ran, run_train, shared_env


def _sandbox_reason() -> str | None:
    from rewards.sandbox import sandbox_unavailable_reason

    return sandbox_unavailable_reason()


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.skipif(_sandbox_reason() is not None, reason=f"no sandbox here: {_sandbox_reason()}")
def test_code_smoke_runs_completions_in_the_sandbox_and_reports_pass_at_1(tmp_path):
    run_dir = tmp_path / "run"
    args = ("--preset", "code-smoke", "--run-dir", str(run_dir))
    result = assert_ran(run_train(*args, sets=["run.backend=local"], env=shared_env()))
    assert "200 generated training problems; 16 held-out ones" in result.stdout

    evals = read_jsonl(run_dir / "eval.jsonl")
    assert evals and all(e["count"] == 16 for e in evals)
    for e in evals:
        assert 0.0 <= e["greedy_pass_at_1"] <= 1.0 and 0.0 <= e["tests_passed_mean"] <= 1.0
        assert sum(v for k, v in e.items() if k.startswith("sandbox_") and k.endswith("_rate")) == 1.0
        assert "error" not in e["statuses"]  # every completion ran in the sandbox
    sampled = [e for e in evals if e["kind"] in ("start", "final")]
    assert len(sampled) == 2 and all(e["k"] == 2 and 0.0 <= e["pass_at_1"] <= 1.0 for e in sampled)

    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if m["phase"] == "grpo"]
    assert metrics and all(m.get("scorer_reward_errors", 0.0) == 0.0 for m in metrics)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and "pass_at_1" in summary["final_eval"]
