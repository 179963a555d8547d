"""A whole run whose environment hangs on the policy's moves (its demonstrations play through, so
the checks before the run pass): each hanging step ends its episode `timeout` at the step deadline
without a reward worker killed, the evaluation names its episodes' statuses, and the first GRPO
step ends the run `failed` in one line with the run's failure policy."""

from __future__ import annotations

import json

import pytest

from tests.service.train_child import run_train, shared_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CASES = "tests.service.env_cases"


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_an_environment_hanging_on_the_policys_moves_fails_the_run_in_one_line(tmp_path):
    run_dir = tmp_path / "run"
    sets = [f"task.env={CASES}:HangsOnBadGuesses", "task.step_timeout_s=1", "run.backend=local"]
    result = run_train("--preset", "env-smoke", "--run-dir", str(run_dir), sets=sets, env=shared_env())
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["steps"] == 7, summary  # the first GRPO step
    error = summary["error"]
    assert error.startswith("reward error rate exceeded at step 7: ") and "\n" not in error
    assert (
        "timeout) = " in error and "step took over 1s without returning, past task.step_timeout_s=1s" in error
    )
    assert "passed chunk_timeout_s" not in output  # no reward worker was killed for it
    evaluation = _rows(run_dir / "eval.jsonl")[0]
    assert set(evaluation["statuses"]) <= {"timeout", "abandoned", "ok", "max_turns", "max_tokens"}
    assert evaluation["statuses"].get("timeout"), evaluation["statuses"]
    ended = ", ".join(f"{status} {count}" for status, count in evaluation["statuses"].items())
    assert f"ended {ended}" in result.stdout  # the evaluation's line names the statuses as they are
    grpo = [r for r in _rows(run_dir / "metrics.jsonl") if r["phase"] == "grpo"]
    assert grpo[-1]["scorer_reward_timeouts"] >= 1 and not grpo[-1].get("scorer_reward_deadline_kills")
