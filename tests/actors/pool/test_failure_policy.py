"""The reward failure policy: what fails a run, what drops a group, what only warns (no Ray)."""

from __future__ import annotations

import pytest

from actors.pool.config import PoolConfig
from actors.pool.failure_policy import (
    BatchCounts,
    RunTotals,
    dropped_groups,
    error_rate_problem,
    expected_dropped_share,
    run_warnings,
)


def test_counts_from_statuses_count_nan_as_error_and_skips_apart():
    # A NaN reward reaches the policy as status error (rewards.user_reward.checked_value).
    counts = BatchCounts.of_statuses(["ok", "error", "timeout", "skipped", "invalid", "error"])
    assert counts == BatchCounts(items=6, errors=2, timeouts=1, skipped=1)
    assert counts.failed == 3 and counts.rate == pytest.approx(0.5)


def test_counts_from_a_step_record_and_from_pool_stats_agree():
    stats = {"reward_items": 16.0, "reward_errors": 5.0, "reward_timeouts": 1.0, "reward_wait_s": 0.3}
    record = {f"scorer_{k}": v for k, v in stats.items()}
    assert (
        BatchCounts.of_stats(stats) == BatchCounts.of_stats(record, prefix="scorer_") == BatchCounts(16, 5, 1)
    )
    assert BatchCounts.of_stats({}) == BatchCounts(0)


@pytest.mark.parametrize(
    ("counts", "fails"),
    [
        (BatchCounts(16, errors=4), False),  # 25% is not more than 0.25
        (BatchCounts(16, errors=5), True),
        (BatchCounts(16, errors=2, timeouts=3), True),  # timeouts count as failures
        (BatchCounts(16, skipped=16), False),  # a skip is the reward's choice, never a failure
        (BatchCounts(0), False),
    ],
)
def test_a_batch_fails_the_run_above_the_threshold(counts, fails):
    assert (error_rate_problem(counts, 0.25) is not None) is fails


def test_the_failure_line_names_the_key_and_the_measured_rate():
    line = error_rate_problem(BatchCounts(16, errors=5, timeouts=1), 0.25)
    assert line == "6 of 16 rewards failed (5 error, 1 timeout) = 37.5% > pool.error_rate_threshold=0.25"
    assert "\n" not in line


def test_a_group_with_any_unscored_item_is_dropped():
    statuses = "ok ok invalid unparsable ok error skipped ok too_long timeout ok ok".split()
    assert dropped_groups(statuses, 4) == [1, 2]
    assert dropped_groups(statuses, 2) == [2, 3, 4]
    with pytest.raises(ValueError, match="do not form groups"):
        dropped_groups(statuses, 5)


def test_expected_dropped_share_grows_with_the_group_size():
    third = BatchCounts(30, errors=10)
    assert expected_dropped_share(third, 1) == pytest.approx(1 / 3)
    assert expected_dropped_share(third, 4) == pytest.approx(1 - (2 / 3) ** 4)
    assert expected_dropped_share(BatchCounts(0), 4) == 0.0


def _rows(**grpo: float) -> list[dict]:
    step = {"phase": "grpo", "groups": 6.0, "unusable_groups": 0.0, "step_time_s": 1.0, "reward_wait_s": 0.1}
    step.update(grpo)
    return [{"phase": "sft", "step_time_s": 100.0}, dict(step), dict(step)]


def test_run_totals_add_up_the_grpo_steps_only():
    totals = RunTotals.of_records(
        _rows(unusable_groups=2.0, scorer_reward_timeouts=3.0, scorer_reward_items=24.0)
    )
    assert totals == RunTotals(
        groups=12, dropped_groups=4, items=48, errors=0, timeouts=6, reward_wait_s=0.2, step_time_s=2.0
    )


def _warn(rows: list[dict]) -> list[str]:
    cfg = PoolConfig()
    return run_warnings(
        RunTotals.of_records(rows),
        max_dropped_share=cfg.max_dropped_share,
        max_reward_wait_share=cfg.max_reward_wait_share,
    )


def test_a_healthy_run_has_no_warnings():
    assert _warn(_rows()) == []
    assert _warn([]) == []


def test_dropping_many_groups_to_timeouts_warns_with_the_timeout_advice():
    (warning,) = _warn(_rows(unusable_groups=3.0, scorer_reward_timeouts=4.0))
    assert warning.startswith("rewards dropped 6 of 12 GRPO groups = 50% > pool.max_dropped_share=0.1")
    assert "8 items timed out" in warning and "pool.item_timeout_s" in warning and "async def" in warning


def test_dropping_many_groups_to_errors_points_at_check_reward():
    (warning,) = _warn(_rows(unusable_groups=2.0, scorer_reward_errors=2.0))
    assert "4 items failed" in warning and "service.check_reward" in warning and "timed out" not in warning


def test_a_run_spent_waiting_for_rewards_warns_with_the_waiting_advice():
    (warning,) = _warn(_rows(reward_wait_s=0.9))
    assert "= 90% > pool.max_reward_wait_share=0.5" in warning
    for advice in ("async def", "threads: true", "pool.item_timeout_s", "pool.placement"):
        assert advice in warning


def test_both_warnings_at_once_and_the_limits_are_validated():
    assert len(_warn(_rows(unusable_groups=6.0, scorer_reward_timeouts=12.0, reward_wait_s=0.95))) == 2
    with pytest.raises(ValueError, match="max_dropped_share"):
        PoolConfig(max_dropped_share=1.5)
