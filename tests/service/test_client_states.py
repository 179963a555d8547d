"""RunState / RunStatus from Ray's job status plus the run's own log lines (no cluster)."""

from __future__ import annotations

import json

import pytest

from service.client import RunState
from service.client.states import status_from_job
from service.progress import PROGRESS_PREFIX, SUMMARY_PREFIX, format_record


def progress(step: int, total: int = 10, phase: str = "grpo", **metrics: float) -> str:
    record = {
        "run_id": "r1",
        "step": step,
        "total_steps": total,
        "phase": phase,
        "eta_s": 2.0 * (total - step),
    }
    return format_record(PROGRESS_PREFIX, record | metrics)


def summary(status: str, **extra) -> str:
    return format_record(
        SUMMARY_PREFIX, {"status": status, "steps": 10, "final_eval": {"exact_match": 0.25}} | extra
    )


def test_terminal_states_are_exactly_the_three_endings():
    assert {s for s in RunState if s.is_terminal()} == {RunState.SUCCEEDED, RunState.FAILED, RunState.STOPPED}
    assert RunState.RUNNING == "RUNNING" and isinstance(RunState.RUNNING, str)


def test_unknown_ray_status_is_named_in_the_error():
    with pytest.raises(ValueError, match="'EXPLODED'.*PENDING"):
        RunState.from_ray("EXPLODED")


def test_pending_job_without_logs_has_no_progress():
    status = status_from_job("r1", "PENDING", "Job has not started yet.", "")
    assert status.state is RunState.PENDING
    assert (status.phase, status.step, status.total_steps, status.eta_s, status.progress) == (None,) * 5
    assert status.metrics == {} and status.error is None


def test_running_job_reports_its_latest_progress_line():
    logs = "\n".join(
        [
            "Running entrypoint for job r1: python -m service.train",
            progress(1, phase="sft", loss=3.0, step_time_s=0.5),
            "some other output",
            progress(4, loss=1.5, reward_mean=0.25, step_time_s=0.4),
        ]
    )
    status = status_from_job(
        "r1", "RUNNING", "Job is currently running.", logs, start_time_ms=1_700_000_000_000
    )
    assert status.state is RunState.RUNNING
    assert (status.phase, status.step, status.total_steps) == ("grpo", 4, 10)
    assert status.metrics == {"loss": 1.5, "reward_mean": 0.25, "step_time_s": 0.4}
    assert status.eta_s == 12.0 and status.progress == 0.4
    assert status.started_at is not None and status.started_at.year == 2023 and status.ended_at is None


def test_finished_run_takes_final_eval_from_summary_and_drops_eta():
    logs = progress(10, loss=0.5) + "\n" + summary("succeeded")
    status = status_from_job("r1", "SUCCEEDED", "Job finished successfully.", logs)
    assert status.state is RunState.SUCCEEDED
    assert status.final_eval == {"exact_match": 0.25} and status.eta_s is None and status.error is None


@pytest.mark.parametrize(
    ("summary_status", "expected"), [("failed", RunState.FAILED), ("stopped", RunState.STOPPED)]
)
def test_summary_overrides_a_clean_exit(summary_status, expected):
    logs = progress(3) + "\n" + summary(summary_status, error="reward pool lost every worker")
    status = status_from_job("r1", "SUCCEEDED", "Job finished successfully.", logs)
    assert status.state is expected
    assert (status.error == "reward pool lost every worker") is (expected is RunState.FAILED)


def test_ray_terminal_state_wins_over_a_success_summary():
    # Stopped by Ray after the summary line was printed: Ray's STOPPED stays.
    status = status_from_job("r1", "STOPPED", "Job was intentionally stopped.", summary("succeeded"))
    assert status.state is RunState.STOPPED


def test_summary_line_does_not_end_a_run_ray_still_runs():
    status = status_from_job("r1", "RUNNING", "", progress(10) + "\n" + summary("succeeded"))
    assert status.state is RunState.RUNNING


def test_failed_run_error_comes_from_summary_when_present():
    logs = progress(2) + "\n" + summary("failed", error="CUDA out of memory at step 3")
    status = status_from_job("r1", "FAILED", "Job entrypoint command failed with exit code 1", logs)
    assert status.error == "CUDA out of memory at step 3"


def test_failed_run_without_summary_says_exit_code_and_last_log_line():
    logs = "Running entrypoint for job r1\nerror: grpo.lr = -1 is not allowed: must be > 0\n\n"
    message = f"Job entrypoint command failed with exit code 2, last available logs (truncated to 20,000 chars):\n{logs}"
    status = status_from_job("r1", "FAILED", message, logs)
    assert (
        status.error
        == "Job entrypoint command failed with exit code 2: error: grpo.lr = -1 is not allowed: must be > 0"
    )
    assert "\n" not in status.error


def test_failed_run_with_no_logs_keeps_rays_first_line():
    status = status_from_job(
        "r1", "FAILED", "runtime_env setup failed: pip install timed out\nTraceback ...", ""
    )
    assert status.error == "runtime_env setup failed: pip install timed out"


def test_malformed_record_falls_back_to_the_previous_one():
    logs = progress(5) + "\n" + PROGRESS_PREFIX + '{"step": 6, "total_st'  # cut mid-line
    assert status_from_job("r1", "RUNNING", "", logs).step == 5


def test_non_numeric_and_boolean_values_are_not_metrics():
    line = PROGRESS_PREFIX + json.dumps(
        {"step": 1, "total_steps": 2, "phase": "sft", "loss": 1.0, "note": "x", "ok": True}
    )
    assert status_from_job("r1", "RUNNING", "", line).metrics == {"loss": 1.0}


def test_to_dict_is_json_ready():
    status = status_from_job("r1", "RUNNING", "", progress(4, loss=1.0), start_time_ms=1_700_000_000_000)
    data = json.loads(json.dumps(status.to_dict()))
    assert data["state"] == "RUNNING" and data["step"] == 4 and data["progress"] == 0.4
    assert data["started_at"].startswith("2023-11-14T")


def test_eval_lines_do_not_hide_the_training_metrics():
    eval_line = PROGRESS_PREFIX + json.dumps(
        {
            "run_id": "r1",
            "step": 4,
            "total_steps": 10,
            "phase": "eval",
            "exact_match": 0.5,
            "reward_mean": 0.7,
        }
    )
    logs = "\n".join([progress(2, phase="sft", loss=2.0), progress(4, loss=1.0, reward_mean=0.1), eval_line])
    status = status_from_job("r1", "RUNNING", "", logs)
    assert (status.phase, status.step) == ("eval", 4)
    assert status.metrics == {"loss": 1.0, "reward_mean": 0.1}
    assert status.eval_metrics == {"exact_match": 0.5, "reward_mean": 0.7}


def test_a_succeeded_run_shows_its_summary_warnings():
    from service.client.render import status_table

    warning = "rewards dropped 11 of 24 GRPO groups = 46% > pool.max_dropped_share=0.1: 30 items timed out"
    logs = summary("succeeded", warnings=[warning])
    status = status_from_job("r1", "SUCCEEDED", "Job finished successfully.", logs)
    assert status.state.value == "SUCCEEDED" and status.warnings == [warning]
    assert status.to_dict()["warnings"] == [warning]
    assert any(row.split() == ["warning", *warning.split()] for row in status_table(status).splitlines())
    assert status_from_job("r1", "SUCCEEDED", "", summary("succeeded")).warnings == []


def test_each_figure_names_the_step_it_comes_from():
    from service.client.render import status_table

    logs = "\n".join(
        [
            progress(7, total=66, loss=-0.2615, reward_mean=0.04048),
            progress(22, total=66, phase="eval", reward_mean=0.5),
        ]
    )
    status = status_from_job("r1", "RUNNING", "", logs)
    assert (status.step, status.metrics_step, status.eval_step) == (22, 7, 22)
    assert status.to_dict()["metrics_step"] == 7
    rows = {row.split()[0]: row.split()[1:] for row in status_table(status).splitlines()}
    assert rows["loss"] == ["-0.2615", "(step", "7)"] and rows["reward_mean"] == ["0.04048", "(step", "7)"]
    assert rows["eval.reward_mean"] == ["0.5", "(step", "22)"]


def test_an_ended_run_shows_its_summarys_step():
    logs = "\n".join([progress(34, total=66, loss=0.1), summary("stopped", steps=35, total_steps=66)])
    status = status_from_job("r1", "STOPPED", "", logs)
    assert (status.state, status.step, status.total_steps) == (RunState.STOPPED, 35, 66)
    assert status.metrics_step == 34  # the figures still say which step they are of
