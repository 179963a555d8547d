"""Whole runs whose rewards fail: past `pool.error_rate_threshold` mid-run the run ends `failed`
with one line and a checkpoint; timeouts that drop many groups leave a `succeeded` run with
warnings and advice (`actors.pool.failure_policy`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.progress import SUMMARY_PREFIX, last_record
from tests.service.train_child import child_env, run_train

EX = "examples.rewards.misbehaving"
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _train(run_dir: Path, reward: str, *sets: str, env: dict[str, str]) -> tuple[int, str, dict]:
    sets = ("run.backend=local", "pool.placement=pool", f"reward.user=[{{fn: '{EX}:{reward}'}}]", *sets)
    args = ("--preset", "smoke", "--run-dir", str(run_dir))
    result = run_train(*args, sets=sets, env=child_env(**env), timeout=300)
    logs = result.stdout + result.stderr
    summary = (
        json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    )
    return result.returncode, logs, summary


def test_a_reward_failing_mid_run_ends_the_run_failed_with_one_line_and_a_checkpoint(tmp_path):
    run_dir = tmp_path / "broken"
    # Scores well through the preflight, the SFT evaluation and the first GRPO step (40 calls on the
    # worker), then raises on every item: the second GRPO step passes the threshold.
    code, logs, summary = _train(run_dir, "breaks_after_calls", env={"GRPO_EXAMPLE_BREAK_AFTER": "40"})
    assert code == 1, logs[-4000:]
    assert summary.get("status") == "failed" and summary["steps"] > 6, logs[-3000:]  # after 6 SFT steps
    error = summary["error"]
    assert error.startswith(f"reward error rate exceeded at step {summary['steps']}: "), error
    assert "rewards failed" in error and "> pool.error_rate_threshold=0.25" in error and "\n" not in error
    assert "ConnectionError: the scoring service went away" in error
    assert last_record(logs, SUMMARY_PREFIX)["error"] == error and "Traceback" not in logs
    checkpoint = f"step_{summary['steps']:06d}"
    assert summary["last_checkpoint"] == checkpoint
    assert (run_dir / "checkpoints" / checkpoint / "manifest.json").is_file()
    # The step that tripped the rule is on record, with its counts.
    last = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    assert (
        last["step"] == summary["steps"] and last["scorer_reward_errors"] > 0.25 * last["scorer_reward_items"]
    )


def test_a_slow_reward_cut_by_item_timeouts_succeeds_with_a_warning(tmp_path):
    run_dir = tmp_path / "slow"
    # An async reward waits 2 s on about one item in six; each item has 0.2 s. A step's timeouts stay
    # under the (raised) threshold, but a group of 4 loses an item about half the time.
    code, logs, summary = _train(
        run_dir,
        "async_slow_one_in_six",
        "pool.item_timeout_s=0.2",
        "pool.error_rate_threshold=0.6",
        env={"GRPO_EXAMPLE_SLOW_S": "2"},
    )
    assert code == 0, logs[-4000:]
    assert summary["status"] == "succeeded" and summary["reward_failed_groups"] > 0.1 * summary["groups"]
    dropped = [w for w in summary["warnings"] if "pool.max_dropped_share=0.1" in w]
    assert len(dropped) == 1 and "items timed out" in dropped[0] and "pool.item_timeout_s" in dropped[0]
    assert last_record(logs, SUMMARY_PREFIX)["warnings"] == summary["warnings"]
    head = next(line for line in logs.splitlines() if " succeeded: step 10/10 " in line)
    assert head.endswith("warning" if len(summary["warnings"]) == 1 else "warnings"), head
    assert f"[train] warning: {dropped[0]}" in logs
    assert "timeout" in summary["first_reward_failure"]  # why the first dropped item failed, said
    assert f"; first reason: {summary['first_reward_failure']}" in logs
