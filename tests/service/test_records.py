"""The run directory's records, without Ray: JSON lines, truncation on resume, progress lines, summary, report."""

from __future__ import annotations

import io
import json
import math

from actors.run.control import CHECKPOINT, ERROR, EVAL, ROLLOUTS, START, STEP, RunControl
from service.progress import PROGRESS_PREFIX, SUMMARY_PREFIX, last_record
from service.recorder import RunRecorder
from service.report import write_report
from service.run_files import JsonlLog, describe_runtime, json_safe, read_jsonl, write_json_atomic
from trainer.schedule import Schedule


def _step(step: int, phase: str, **extra) -> dict:
    return {"step": step, "phase": phase, "loss": 1.0 / step, "step_time_s": 0.5, **extra}


def _eval(step: int, phase: str, kind: str, reward: float) -> dict:
    return {
        "step": step, "phase": phase, "kind": kind, "exact_match": reward / 2, "valid_rate": 0.9,
        "reward_mean": reward, "count": 8, "samples": [{"prompt": "e4", "completion": "x", "reward": 0.1}],
    }  # fmt: skip


def test_json_safe_turns_non_finite_numbers_into_null():
    assert json_safe({"a": math.nan, "b": [math.inf, 1.5], "c": True}) == {
        "a": None,
        "b": [None, 1.5],
        "c": True,
    }


def test_truncate_keeps_rows_up_to_the_step_and_drops_a_torn_line(tmp_path):
    log = JsonlLog(tmp_path / "m.jsonl")
    for step in range(1, 6):
        log.append({"step": step})
    with open(log.path, "a") as f:
        f.write('{"step": 6, "lo')  # a writer killed mid-line
    assert [r["step"] for r in read_jsonl(log.path)] == [1, 2, 3, 4, 5]
    assert log.truncate_after(3) == 3
    assert [r["step"] for r in log.rows()] == [1, 2, 3]
    log.append({"step": 4})
    assert [r["step"] for r in log.rows()] == [1, 2, 3, 4]
    assert log.truncate_after(None) == 4 and log.rows() == []


def test_write_json_atomic_leaves_no_temporary(tmp_path):
    write_json_atomic(tmp_path / "s.json", {"x": math.nan})
    assert json.loads((tmp_path / "s.json").read_text()) == {"x": None}
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


def _recorder(tmp_path, out) -> RunRecorder:
    return RunRecorder(tmp_path, "run-1", Schedule(sft_steps=2, grpo_steps=3), out=out)


def test_events_become_files_progress_lines_and_a_summary(tmp_path):
    out = io.StringIO()
    rec = _recorder(tmp_path, out)
    control = RunControl("run-1", export_metrics=False)  # the same path the actor takes
    control.publish(START, {"from_step": None, "world_size": 1})
    control.publish(STEP, _step(1, "sft"))
    control.publish(STEP, _step(2, "sft"))
    control.publish(EVAL, _eval(2, "sft", "start", 0.5))
    for step in (3, 4, 5):
        control.publish(STEP, _step(step, "grpo", reward_mean=0.5 + step / 100, kl=0.01, entropy=math.nan))
    control.publish(EVAL, _eval(5, "grpo", "final", 0.6))
    control.publish(CHECKPOINT, {"step": 5, "name": "step_000005"})
    for kind, record in control.drain():
        rec.handle(kind, record)
    summary = rec.finish("succeeded")

    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [1, 2, 3, 4, 5]
    assert [r["phase"] for r in metrics] == ["sft", "sft", "grpo", "grpo", "grpo"]
    assert metrics[2]["entropy"] is None and metrics[2]["reward_mean"] == 0.53
    evals = read_jsonl(tmp_path / "eval.jsonl")
    assert [(e["step"], e["phase"]) for e in evals] == [(2, "sft"), (5, "grpo")]

    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["status"] == "succeeded" and saved["steps"] == 5 and saved["total_steps"] == 5
    assert saved["final_eval"]["reward_mean"] == 0.6 and saved["grpo_start_eval"]["reward_mean"] == 0.5
    assert math.isclose(saved["gain"]["reward_mean"], 0.1)
    assert saved["final_samples"][0]["prompt"] == "e4" and saved["last_checkpoint"] == "step_000005"
    assert summary["run_id"] == "run-1" and summary["wall_time_s"] >= 0

    logs = out.getvalue()
    progress = last_record(logs, PROGRESS_PREFIX)
    assert progress["phase"] == "eval" and progress["step"] == 5 and progress["total_steps"] == 5
    line = [ln for ln in logs.splitlines() if '"step":4,' in ln and ln.startswith(PROGRESS_PREFIX)][0]
    step4 = json.loads(line[len(PROGRESS_PREFIX) :])
    assert step4["phase"] == "grpo" and step4["reward_mean"] == 0.54 and math.isclose(step4["eta_s"], 0.5)
    assert last_record(logs, SUMMARY_PREFIX)["status"] == "succeeded"
    assert "samples" not in last_record(logs, SUMMARY_PREFIX)["final_eval"]


def test_a_resume_truncates_records_past_its_checkpoint(tmp_path):
    first = _recorder(tmp_path, io.StringIO())
    first.handle(START, {"from_step": None})
    for step in (1, 2, 3):
        first.handle(STEP, _step(step, "sft" if step <= 2 else "grpo"))
    first.handle(EVAL, _eval(2, "sft", "start", 0.4))
    first.handle(EVAL, _eval(3, "grpo", "periodic", 0.5))  # after the checkpoint of step 2: redone
    second = _recorder(tmp_path, io.StringIO())
    second.handle(START, {"from_step": 2})
    second.handle(STEP, _step(3, "grpo"))
    second.handle(EVAL, _eval(3, "grpo", "periodic", 0.55))
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3]
    assert [r["reward_mean"] for r in read_jsonl(tmp_path / "eval.jsonl")] == [0.4, 0.55]
    summary = second.finish("stopped")
    assert summary["resumed_from"] == 2 and summary["steps"] == 3 and summary["status"] == "stopped"


def _rows(step: int) -> dict:
    rows = [
        {"group": 0, "sample": i, "prompt": "e4", "completion": f"c{step}{i}", "reward": i / 2}
        for i in (0, 1)
    ]
    return {"step": step, "rows": rows}


def test_rollouts_become_one_line_per_completion_and_a_resume_writes_them_again(tmp_path):
    out = io.StringIO()
    first = _recorder(tmp_path, out)
    first.handle(START, {"from_step": None})
    for step in (3, 4, 5):
        first.handle(ROLLOUTS, _rows(step))
    first.finish("stopped")
    assert "summary.json, rollouts.jsonl" in out.getvalue().splitlines()[-2]  # where the records are
    rows = read_jsonl(tmp_path / "rollouts.jsonl")
    assert [(r["step"], r["completion"]) for r in rows][:3] == [(3, "c30"), (3, "c31"), (4, "c40")]
    second = _recorder(tmp_path, io.StringIO())
    second.handle(START, {"from_step": 3})
    second.handle(ROLLOUTS, _rows(4))
    assert [r["step"] for r in read_jsonl(tmp_path / "rollouts.jsonl")] == [3, 3, 4, 4]


def test_a_run_without_rollouts_writes_no_file(tmp_path):
    out = io.StringIO()
    rec = _recorder(tmp_path, out)
    rec.handle(START, {"from_step": None})
    rec.finish("succeeded")
    assert not (tmp_path / "rollouts.jsonl").exists() and "rollouts.jsonl" not in out.getvalue()


def test_an_error_event_is_the_failure_reason(tmp_path):
    rec = _recorder(tmp_path, io.StringIO())
    rec.handle(ERROR, {"step": 3, "reason": "RuntimeError: boom"})
    assert rec.error == "RuntimeError: boom"
    assert rec.finish("failed", rec.error)["error"] == "RuntimeError: boom"


def test_report_png_is_drawn_from_the_records(tmp_path):
    rec = _recorder(tmp_path, io.StringIO())
    for step in (1, 2):
        rec.handle(STEP, _step(step, "sft"))
    rec.handle(EVAL, _eval(2, "sft", "start", 0.4))
    for step in (3, 4, 5):
        rec.handle(STEP, _step(step, "grpo", reward_mean=0.5, kl=0.01, entropy=1.0))
    rec.handle(EVAL, _eval(5, "grpo", "final", 0.6))
    path = write_report(tmp_path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_report_of_an_empty_run_still_draws(tmp_path):
    assert write_report(tmp_path).exists()


def test_the_summary_and_its_last_lines_count_groups_dropped_for_reward_failures(tmp_path):
    out = io.StringIO()
    rec = _recorder(tmp_path, out)
    rec.handle(START, {"from_step": None, "world_size": 1})
    rec.handle(STEP, _step(1, "sft"))
    rec.handle(STEP, _step(2, "sft"))
    rec.handle(STEP, _step(3, "grpo", groups=4.0, unusable_groups=3.0, reward_mean=0.4))
    skipped = {"groups": 4.0, "unusable_groups": 4.0, "skip_reason": "no update: all 4 groups dropped"}
    rec.handle(STEP, {**_step(4, "grpo", **skipped), "loss": None, "reward_mean": None})
    rec.handle(STEP, _step(5, "grpo", groups=4.0, unusable_groups=0.0, reward_mean=0.5))
    summary = rec.finish("succeeded")
    assert (summary["reward_failed_groups"], summary["groups"], summary["skipped_steps"]) == (7, 12, 1)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["reward_failed_groups"] == 7
    assert (
        "rewards failed in 7 of 12 GRPO groups (dropped from the loss); 1 steps without an update"
        in out.getvalue()
    )
    assert "skipped: no update: all 4 groups dropped" in out.getvalue()


def test_a_run_whose_rewards_failed_on_a_few_items_says_why_the_first_one_failed(tmp_path):
    out = io.StringIO()
    rec = _recorder(tmp_path, out)
    rec.handle(START, {"from_step": None, "world_size": 1})
    rec.handle(STEP, _step(3, "grpo", groups=4.0, unusable_groups=0.0, reward_mean=0.4))
    failed = {"groups": 4.0, "unusable_groups": 1.0, "reward_failure_reasons": ["ValueError: bad row 7"]}
    rec.handle(STEP, _step(4, "grpo", reward_mean=0.5, **failed))
    rec.handle(STEP, {**_step(5, "grpo", reward_mean=0.5, **failed), "reward_failure_reasons": ["later"]})
    summary = rec.finish("succeeded")
    assert summary["first_reward_failure"] == "ValueError: bad row 7"
    assert (
        "GRPO groups (dropped from the loss); 0 steps without an update; first reason: ValueError: bad row 7"
        in (out.getvalue())
    )


def test_a_run_that_dropped_many_groups_succeeds_with_a_warning_in_its_summary(tmp_path):
    from actors.pool.config import PoolConfig

    out = io.StringIO()
    limits = PoolConfig(max_dropped_share=0.5)
    rec = RunRecorder(tmp_path, "run-1", Schedule(sft_steps=2, grpo_steps=3), out=out, limits=limits)
    for step in (3, 4, 5):
        rec.handle(
            STEP, _step(step, "grpo", groups=4.0, unusable_groups=2.0 + (step == 5), reward_wait_s=0.1)
        )
    summary = rec.finish("succeeded")
    (warning,) = summary["warnings"]
    assert warning.startswith("rewards dropped 7 of 12 GRPO groups = 58% > pool.max_dropped_share=0.5")
    assert json.loads((tmp_path / "summary.json").read_text())["warnings"] == [warning]
    lines = out.getvalue().splitlines()
    head = next(i for i, line in enumerate(lines) if "succeeded: step 5/5" in line)
    assert lines[head].endswith(" with 1 warning") and lines[head + 1] == f"[train] warning: {warning}"
    assert last_record(out.getvalue(), SUMMARY_PREFIX)["warnings"] == [warning]
    assert rec.finish("failed", "RuntimeError: boom")["warnings"] == []  # the error says it all


def test_the_pool_size_warning_has_no_others_to_name_when_every_worker_is_gone(tmp_path):
    out = io.StringIO()
    rec = _recorder(tmp_path, out)
    rec.handle(STEP, _step(3, "grpo", pool_workers=1.0, pool_workers_alive=0.0))
    rec.handle(STEP, _step(4, "grpo", pool_workers=1.0, pool_workers_alive=1.0))
    text = out.getvalue()
    assert "none of the 1 reward workers takes work at step 3" in text and "the others" not in text
    assert "all 1 reward workers take work again at step 4" in text


def test_the_runtime_line_names_decoding_and_attention_where_they_are_recorded():
    base = {"precision": "bf16", "precision_reason": "auto: x", "torch_threads": 2}
    line = describe_runtime({**base, "sampling_precision": "fp32", "attention": "eager"})
    assert line.startswith("bf16 (auto: x), decoding in fp32, eager attention, compile off, 2 torch threads")
    same = describe_runtime({**base, "sampling_precision": "bf16", "attention": "sdpa"})
    assert "decoding in" not in same and ", sdpa attention," in same
    assert describe_runtime(base).startswith("bf16 (auto: x), compile off")  # a runtime.json written before
