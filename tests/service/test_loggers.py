"""TensorBoard and W&B fed by the records, read back by TensorBoard's own reader and W&B's offline log."""

from __future__ import annotations

import io
import json
import math

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from wandb_records import history, offline_run_file

from actors.metric_names import EVAL_METRICS, GROUPS, STEP_METRICS, logger_name, metric_for
from actors.run.control import EVAL, ROLLOUTS, START, STEP
from service.config import LoggingConfig, WandbConfig
from service.loggers import RunLoggers, missing_extras, open_loggers, scalars
from service.loggers.rollout_table import COLUMNS
from service.recorder import RunRecorder
from service.run_files import read_jsonl
from trainer.schedule import Schedule


def _step_record(step: int) -> dict:
    phase = "sft" if step <= 2 else "grpo"
    record = {"step": step, "phase": phase, "time": 1.0e9 + step, "loss": 1.0 / step, "step_time_s": 0.5,
              "lr": 1e-3, "grad_norm": 0.7, "skipped": 0.0}  # fmt: skip
    if phase == "grpo":
        record.update(reward_mean=0.1 * step, kl=0.01 * step, entropy=math.nan, sample_s=0.2, ref_s=0.05,
                      update_s=0.2, reward_wait_s=0.001, scorer_reward_timeouts=1.0, pool_workers_alive=2.0,
                      a_metric_nobody_listed=3.0,
                      reward_components={"validity": 0.5, "mymod:format": 0.25},
                      reward_metrics={"exact_share": 0.5})  # fmt: skip
    return record


ROLLOUT_ROWS = [
    {"group": 0, "sample": i, "prompt": "e4", "completion": f"fen|{i}", "reward": i / 2, "status": "ok",
     "advantage": i - 0.5, "in_loss": True, "tokens": 5, "truncated": False}
    for i in (0, 1)
]  # fmt: skip
ROLLOUT_ROWS[1]["log_extra"] = {"expected": "1|nef"}  # a TRL-style reward's log_extra column


def _eval_record(step: int) -> dict:
    return {"step": step, "phase": "grpo", "kind": "final", "exact_match": 0.25, "valid_rate": 0.5,
            "reward_mean": 0.6, "count": 16, "by_plies": {"1": {"exact_match": 0.5}, "2": {"exact_match": 0.0}},
            "samples": [{"prompt": "e4", "completion": "x"}]}  # fmt: skip


def test_the_catalogue_names_each_key_once_in_its_group():
    for metrics in (STEP_METRICS, EVAL_METRICS):
        assert len({m.key for m in metrics}) == len(metrics) and len({m.name for m in metrics}) == len(
            metrics
        )
        assert all(m.group in GROUPS for m in metrics)
    assert logger_name("step", "reward_mean") == "train/reward_mean"
    assert logger_name("step", "sample_s") == "time/sample_s"
    assert logger_name("step", "scorer_reward_timeouts") == "pool/timeouts"
    assert logger_name("eval", "exact_match") == "eval/exact_match"
    assert logger_name("step", "new_key") == "train/new_key" and metric_for("step", "new_key") is None


def test_scalars_keep_every_finite_number_and_flatten_nested_figures():
    values = scalars(_step_record(3), "step")
    assert values["train/loss"] == pytest.approx(1 / 3) and values["pool/workers_alive"] == 2.0
    assert "train/entropy" not in values and "train/step" not in values and "train/time" not in values
    assert values["train/a_metric_nobody_listed"] == 3.0
    assert values["train/rewards/validity"] == 0.5 and values["train/rewards/mymod:format"] == 0.25
    evals = scalars(_eval_record(5), "eval")
    assert evals["eval/by_plies/1/exact_match"] == 0.5 and "eval/samples" not in evals


def _run(tmp_path, settings: LoggingConfig) -> RunRecorder:
    warnings: list[str] = []
    loggers = open_loggers(settings, tmp_path, "run.1", {"seed": 0}, warnings.append)
    assert len(loggers) == int(settings.tensorboard) + int(settings.wandb is not None) and warnings == []
    recorder = RunRecorder(
        tmp_path, "run.1", Schedule(sft_steps=2, grpo_steps=3), out=io.StringIO(), sinks=[loggers]
    )
    recorder.handle(START, {"from_step": None, "world_size": 1})
    for step in range(1, 6):
        if step == 4:  # training completions come before their step's record
            recorder.handle(ROLLOUTS, {"step": 4, "rows": ROLLOUT_ROWS})
        recorder.handle(STEP, _step_record(step))
    recorder.handle(EVAL, _eval_record(5))
    loggers.finish(recorder.finish("succeeded"))
    return recorder


def _expected(tmp_path) -> dict[str, dict[int, float]]:
    """Every scalar of metrics.jsonl and eval.jsonl: logger name -> {step: value}."""
    expected: dict[str, dict[int, float]] = {}
    for kind, name in (("step", "metrics.jsonl"), ("eval", "eval.jsonl")):
        for row in read_jsonl(tmp_path / name):
            for tag, value in scalars(row, kind).items():
                expected.setdefault(tag, {})[row["step"]] = value
    return expected


def test_tensorboards_reader_loads_every_per_step_scalar(tmp_path):
    _run(tmp_path, LoggingConfig(tensorboard=True))
    reader = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    reader.Reload()
    expected = _expected(tmp_path)
    assert set(reader.Tags()["scalars"]) == set(expected)
    for tag, points in expected.items():
        got = {event.step: event.value for event in reader.Scalars(tag)}
        assert got == pytest.approx(points), tag
    [text] = reader.Tensors("train/rollouts/text_summary")  # the training completions, as markdown
    table = text.tensor_proto.string_val[0].decode()
    assert text.step == 4 and "| 0 | e4 | fen\\|1 | 0.5 | ok | 0.5 | True | 1\\|nef |" in table, table
    assert table.splitlines()[0].endswith("| in_loss | expected |")  # the logged column, as TRL adds it


def test_a_wandb_offline_run_holds_the_same_scalars(tmp_path):
    _run(tmp_path, LoggingConfig(wandb=WandbConfig(project="grpo-test", mode="offline")))
    rows = history(offline_run_file(tmp_path))
    got: dict[str, dict[int, float]] = {}
    tables = [
        (
            row["_step"],
            {
                k.removeprefix("train/rollouts/"): row.pop(k)
                for k in list(row)
                if k.startswith("train/rollouts/")
            },
        )
        for row in rows
        if "train/rollouts/_type" in row
    ]
    assert [(step, t["_type"], t["nrows"], t["ncols"]) for step, t in tables] == [(4, "table-file", 2, 8)]
    saved = json.loads((offline_run_file(tmp_path).parent / "files" / tables[0][1]["path"]).read_text())
    assert saved["columns"] == [*COLUMNS, "expected"]
    assert (
        saved["data"][1] == [0, "e4", "fen|1", 0.5, "ok", 0.5, True, "1|nef"] and saved["data"][0][-1] is None
    )
    for row in rows:
        for tag, value in row.items():
            if not tag.startswith("_"):
                got.setdefault(tag, {})[row["_step"]] = value
    expected = _expected(tmp_path)
    assert set(got) == set(expected)
    for tag, points in expected.items():
        assert got[tag] == pytest.approx(points), tag


class Broken:
    name = "broken"

    def start(self, from_step):
        pass

    def step(self, record):
        raise OSError("disk full")


def test_a_failing_logger_is_dropped_with_one_warning_and_the_records_go_on(tmp_path):
    warnings: list[str] = []
    loggers = RunLoggers([Broken()], warnings.append)
    recorder = RunRecorder(
        tmp_path, "r", Schedule(sft_steps=3, grpo_steps=0), out=io.StringIO(), sinks=[loggers]
    )
    for step in (1, 2, 3):
        recorder.handle(STEP, _step_record(step))
    assert warnings == ["broken logging stopped: OSError: disk full"] and len(loggers) == 0
    assert [row["step"] for row in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3]


class ScalarsOnly:
    name = "scalars-only"

    def __init__(self):
        self.steps = []

    def step(self, record):
        self.steps.append(record["step"])


def test_a_logger_that_shows_no_tables_is_passed_over_for_rollouts_not_dropped():
    warnings: list[str] = []
    scalars_only = ScalarsOnly()
    loggers = RunLoggers([scalars_only], warnings.append)
    loggers.rollouts(4, ROLLOUT_ROWS)
    loggers.step(_step_record(4))
    assert warnings == [] and len(loggers) == 1 and scalars_only.steps == [4]


def test_a_logger_without_its_package_is_a_config_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    problems = missing_extras(LoggingConfig(wandb=WandbConfig(project="p")))
    assert problems == [
        "logging.wandb: W&B is not installed (No module named 'wandb'); pip install -e '.[wandb]'"
    ]
