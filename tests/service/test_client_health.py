"""`status` shows the pool's health and the latest held-out figures; `--watch` frames (no cluster)."""

from __future__ import annotations

from service.client import RunState
from service.client.render import CLEAR_SCREEN, status_table, watch_frame
from service.client.states import status_from_job
from service.progress import PROGRESS_PREFIX, format_record, pool_totals

POOL = {"workers": 4, "workers_alive": 3, "worker_restarts": 2, "timeouts": 1, "errors": 0, "retries": 1,
        "placement": {"reward_workers": "cpu nodes", "chunk_size": 2048}}  # fmt: skip


def _logs() -> str:
    step = {"run_id": "r1", "step": 12, "total_steps": 40, "phase": "grpo", "loss": 0.1, "eta_s": 30.0,
            "reward_mean": 0.6, "pool": POOL}  # fmt: skip
    held_out = {"run_id": "r1", "step": 10, "total_steps": 40, "phase": "eval", "exact_match": 0.25,
                "valid_rate": 0.75, "reward_mean": 0.61, "count": 128,
                "by_plies": {"1": {"exact_match": 0.5, "count": 40}, "4": {"exact_match": 0.1, "count": 30}}}  # fmt: skip
    return "\n".join([format_record(PROGRESS_PREFIX, held_out), format_record(PROGRESS_PREFIX, step)])


def test_status_carries_the_pool_and_the_latest_evaluation():
    status = status_from_job("r1", "RUNNING", None, _logs())
    assert status.pool == POOL and status.metrics["reward_mean"] == 0.6 and "pool" not in status.metrics
    assert status.eval_step == 10 and status.eval_metrics["exact_match"] == 0.25
    assert status.eval_details == {
        "by_plies": {"1": {"exact_match": 0.5, "count": 40}, "4": {"exact_match": 0.1, "count": 30}}
    }
    assert status.to_dict()["pool"]["workers_alive"] == 3


def test_status_table_shows_pool_health_placement_and_held_out_by_length():
    rows = dict(
        line.split(None, 1)
        for line in status_table(status_from_job("r1", "RUNNING", None, _logs())).splitlines()[1:]
    )
    # each figure says the step it comes from: the pool's the last step record's, the held-out the evaluation's
    assert rows["pool.workers"] == "3 of 4 alive (step 12)" and rows["pool.worker_restarts"] == "2 (step 12)"
    assert rows["pool.timeouts"] == "1 (step 12)"
    assert rows["pool.placement"] == "reward_workers=cpu nodes, chunk_size=2048 (step 12)"
    assert rows["eval.step"] == "10" and rows["eval.exact_match"] == "0.25 (step 10)"
    assert rows["eval.by_plies.1"] == "exact_match 0.5  count 40 (step 10)"


def test_a_run_without_pool_records_shows_no_pool_rows():
    table = status_table(status_from_job("r1", "PENDING", None, ""))
    assert "pool." not in table and "eval." not in table


def test_a_watch_frame_says_when_and_ends_with_the_table():
    status = status_from_job("r1", "SUCCEEDED", None, _logs())
    assert status.state is RunState.SUCCEEDED
    frame = watch_frame(status, 2.0, "12:00:05")
    assert frame.splitlines()[0] == "r1 at 12:00:05, every 2s (the run has ended)"
    assert frame.endswith(status_table(status)) and CLEAR_SCREEN.startswith("\x1b[H")


def test_the_pool_health_carries_recycles_and_the_largest_worker_rss():
    rows = [
        {"step": 5, "phase": "grpo", "scorer_worker_recycled": 1.0, "pool_worker_rss_mb_max": 384.2},
        {"step": 6, "phase": "grpo", "scorer_worker_recycled": 2.0, "pool_worker_rss_mb_max": 201.5},
    ]
    pool = pool_totals(rows)
    assert pool["recycled"] == 3 and pool["worker_rss_mb_max"] == 201.5
    step = {"run_id": "r1", "step": 6, "total_steps": 40, "phase": "grpo", "pool": {**POOL, **pool}}
    table = status_table(status_from_job("r1", "RUNNING", None, format_record(PROGRESS_PREFIX, step)))
    shown = dict(line.split(None, 1) for line in table.splitlines()[1:])
    assert shown["pool.recycled"] == "3 (step 6)" and shown["pool.worker_rss_mb_max"] == "202 MB (step 6)"
