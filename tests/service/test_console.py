"""The console without Ray: cadence of plain lines, what each verbosity shows, the live bar, Ray's noise."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from service.console import Cadence, LiveConsole, PlainConsole, Verbosity, make_console
from service.console import lines as console_lines
from service.console.ray_logs import filter_worker_lines, kept_lines
from service.progress import PROGRESS_PREFIX, SUMMARY_PREFIX, for_people, last_record

SUMMARY = {
    "run_id": "r1", "status": "succeeded", "steps": 10, "total_steps": 10, "wall_time_s": 75.0,
    "run_dir": "/runs/r1", "error": None, "gain": {"reward_mean": 0.148},
    "grpo_start_eval": {"step": 6, "reward_mean": 0.527, "exact_match": 0.086, "valid_rate": 0.211},
    "final_eval": {"step": 10, "reward_mean": 0.675, "exact_match": 0.188, "valid_rate": 0.711},
}  # fmt: skip
EVAL = {"step": 6, "kind": "start", "phase": "sft", "reward_mean": 0.5, "exact_match": 0.25,
        "valid_rate": 0.5, "count": 16, "samples": [{"prompt": "e4", "completion": "x", "reward": 0.1}]}  # fmt: skip


def _progress(step: int, phase: str = "grpo", total: int = 10) -> dict:
    return {"run_id": "r1", "step": step, "total_steps": total, "phase": phase, "loss": 0.5,
            "step_time_s": 1.2, "eta_s": 30.0, "reward_mean": 0.61, "kl": 0.01}  # fmt: skip


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cadence_forces_the_first_step_each_phase_change_and_the_last_step():
    clock = FakeClock()
    cadence = Cadence(every_steps=1, interval_s=10.0, clock=clock)
    due = []
    for step in range(1, 21):
        clock.now += 1.0  # a step a second: a regular line every 10 s
        phase = "sft" if step <= 12 else "grpo"
        if cadence.due(step, phase, total_steps=20):
            due.append(step)
    assert due == [1, 11, 13, 20]  # first, +10 s, the first GRPO step, the last step


def test_cadence_needs_both_enough_steps_and_enough_seconds():
    clock = FakeClock()
    cadence = Cadence(every_steps=5, interval_s=0.0, clock=clock)
    assert [s for s in range(1, 13) if cadence.due(s, "sft", 100)] == [1, 6, 11]


def test_plain_console_prints_a_line_and_a_record_together_at_its_cadence():
    out = io.StringIO()
    console = PlainConsole(out, Verbosity.NORMAL, every_steps=2)
    for step in range(1, 6):
        console.step(_progress(step))
    text = out.getvalue().splitlines()
    human = [ln for ln in text if ln.startswith("[train] step")]
    records = [json.loads(ln[len(PROGRESS_PREFIX) :]) for ln in text if ln.startswith(PROGRESS_PREFIX)]
    assert [r["step"] for r in records] == [1, 3, 5]
    assert human[0] == "[train] step 1/10 grpo  loss 0.5000  reward 0.610  kl 0.0100  1.20 s/step  eta 30s"
    assert len(human) == len(records) == len(text) // 2


def test_a_run_that_ends_between_its_lines_writes_its_last_step_before_the_summary():
    out = io.StringIO()
    console = PlainConsole(out, Verbosity.NORMAL, every_steps=3)
    for step in range(1, 6):  # stopped at step 5 of 10: its line was not due
        console.step(_progress(step))
    console.summary({**SUMMARY, "status": "stopped", "steps": 5}, [])
    records = [
        json.loads(ln[len(PROGRESS_PREFIX) :])
        for ln in out.getvalue().splitlines()
        if ln.startswith(PROGRESS_PREFIX)
    ]
    assert [r["step"] for r in records] == [1, 4, 5]  # the last step's figures, for the client
    assert last_record(out.getvalue(), SUMMARY_PREFIX)["steps"] == 5


def test_quiet_keeps_the_records_warnings_and_summary_only():
    out = io.StringIO()
    console = PlainConsole(out, Verbosity.QUIET)
    console.header("[train] run r1 in /runs/r1")
    console.step(_progress(1))
    console.evaluation({"run_id": "r1", "step": 6, "phase": "eval", "exact_match": 0.25}, EVAL)
    console.warning("the cluster has 2 CPUs")
    console.summary(SUMMARY, ["report.png"])
    text = out.getvalue()
    assert "[train] run r1 in" not in text and "[train] step" not in text and "[eval]" not in text
    assert last_record(text, PROGRESS_PREFIX)["exact_match"] == 0.25
    assert "[train] warning: the cluster has 2 CPUs" in text
    assert last_record(text, SUMMARY_PREFIX)["status"] == "succeeded"


def test_verbose_shows_every_step_samples_and_details():
    out = io.StringIO()
    console = PlainConsole(out, Verbosity.VERBOSE, every_steps=5, interval_s=60)
    for step in (1, 2, 3):
        console.step(_progress(step))
    console.evaluation({"run_id": "r1", "step": 6, "phase": "eval"}, EVAL)
    console.detail("[train] checkpoint step_000003 saved")
    text = out.getvalue()
    assert text.count("[train] step") == 3 and "[eval]   'e4' -> 'x' (reward 0.100)" in text
    assert "checkpoint step_000003 saved" in text


def test_summary_says_outcome_gain_and_where_the_records_are():
    assert console_lines.summary_lines(SUMMARY, ["report.png", "report.html"]) == [
        "[train] run r1 succeeded: step 10/10 in 1m15s",
        "[train] held-out reward 0.527 -> 0.675 (+0.148), exact 8.6% -> 18.8%, valid 21.1% -> 71.1%",
        "[train] records in /runs/r1: metrics.jsonl, eval.jsonl, summary.json, report.png, report.html",
    ]


def test_live_console_draws_one_bar_and_writes_evaluations_above_it(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")  # the bar's width when the output is not a terminal
    out = io.StringIO()
    console = LiveConsole(out, Verbosity.NORMAL)
    for step in range(1, 4):
        console.step(_progress(step, total=3))
    console.evaluation({"step": 3}, EVAL)
    console.summary(SUMMARY, [])
    frames = out.getvalue().replace("\r", "\n").splitlines()
    bars = [f for f in frames if "%|" in f]
    assert bars and "3/3" in bars[-1] and "reward 0.610" in bars[-1] and "eta 30s" in bars[-1]
    assert PROGRESS_PREFIX.strip() not in out.getvalue()  # nothing machine-readable on a terminal
    assert any(f.startswith("[eval] step 6 (start, sft policy)") for f in frames)
    assert frames[-1].startswith("[train] records in /runs/r1")


def test_make_console_picks_plain_lines_when_not_a_terminal():
    assert isinstance(make_console(out=io.StringIO()), PlainConsole)


def _quiet_run_text(monkeypatch, job: bool) -> str:
    if job:
        monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", '{"metadata": {"job_submission_id": "j1"}}')
    else:
        monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    out = io.StringIO()
    console = make_console(Verbosity.QUIET, out)
    console.step(_progress(1))
    console.evaluation({"run_id": "r1", "step": 6, "phase": "eval", "exact_match": 0.25}, EVAL)
    console.summary(SUMMARY, ["report.png"])
    return out.getvalue()


def test_quiet_output_redirected_outside_a_ray_job_has_no_records(monkeypatch):
    text = _quiet_run_text(monkeypatch, job=False)
    assert PROGRESS_PREFIX.strip() not in text and SUMMARY_PREFIX.strip() not in text
    assert "succeeded" in text  # the summary lines stay
    in_a_job = _quiet_run_text(monkeypatch, job=True)  # the client reads a job's log by its records
    assert last_record(in_a_job, PROGRESS_PREFIX)["exact_match"] == 0.25
    assert last_record(in_a_job, SUMMARY_PREFIX)["status"] == "succeeded"


def test_quiet_drops_the_workers_placement_line_and_keeps_their_warnings():
    worker = {"actor_name": "RayTrainWorker", "lines": [
        "[placement] rewards scored in process: 0.02 ms an item",
        "[train] warning: a reward call was killed",
    ]}  # fmt: skip
    assert kept_lines(worker) == worker["lines"]
    assert kept_lines(worker, quiet=True) == ["[train] warning: a reward call was killed"]


def test_ray_train_bookkeeping_and_report_lines_are_dropped_the_rest_kept():
    assert (
        kept_lines({"actor_name": "PlacementGroupCleaner", "lines": ["Traceback", "ConnectionError: x"]})
        == []
    )
    assert kept_lines({"actor_name": "TrainController", "lines": ["Failed to send resource request"]}) == []
    worker = {"actor_name": "RayTrainWorker", "lines": [
        "Reporting training result 1: TrainingReport(checkpoint=...) from rank 0",
        "checkpoint /x/step_000004 cannot be loaded (ValueError: bad); trying older ones",
    ]}  # fmt: skip
    assert kept_lines(worker) == [
        "checkpoint /x/step_000004 cannot be loaded (ValueError: bad); trying older ones"
    ]
    assert kept_lines({"pid": "raylet", "lines": ["Memory on the node was 95% full: killed a worker"]})


def test_the_filter_sits_in_front_of_rays_printer_and_prints_inside_the_console():
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    printed, entered = [], []

    @contextlib.contextmanager
    def around():
        entered.append(True)
        yield

    saved = list(dispatcher.handlers)
    dispatcher.handlers = [("ray_print_logs", lambda data: printed.append(data["lines"]))]
    try:
        assert filter_worker_lines(around) is True
        dispatcher.emit({"actor_name": "RayTrainWorker", "lines": ["Reporting training result 2: x", "kept"]})
        dispatcher.emit({"actor_name": "PreemptionWatcher", "lines": ["core_worker.cc: noise"]})
    finally:
        dispatcher.handlers = saved
    assert printed == [["kept"]] and entered == [True]


def test_without_rays_printer_the_filter_changes_nothing():
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    saved = list(dispatcher.handlers)
    dispatcher.handlers = []
    try:
        assert filter_worker_lines(contextlib.nullcontext) is False and dispatcher.handlers == []
    finally:
        dispatcher.handlers = saved


@pytest.mark.parametrize("chunks", [["a\n[grpo-progress] {}\nb\n"], ["a\n[grpo-pro", "gress] {}\nb", "\n"]])
def test_logs_for_people_leave_out_progress_records_even_split_across_chunks(chunks):
    assert "".join(for_people(chunks)) == "a\nb\n"
