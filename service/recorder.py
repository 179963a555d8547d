"""The driver's side of the records: events from rank 0 become files, console lines, logger points
and the summary.

Free of Ray so it is tested directly. Each event (see `actors.run.control`) is handled in the
order rank 0 published it: a `start` truncates the logs past the checkpoint being resumed from
(so no row is ever duplicated), a `step` appends to metrics.jsonl, goes to the loggers
(TensorBoard, W&B) and to the console, an `eval` likewise to eval.jsonl, an `error` keeps the
reason for the summary. The driver alone does this, so a DDP run logs everything once.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO

from actors.pool.failure_policy import RunTotals, run_warnings
from actors.run.control import CHECKPOINT, ERROR, EVAL, ROLLOUTS, START, STEP
from service.console import Console, PlainConsole
from service.progress import eval_progress, pool_totals, step_progress
from service.run_files import (
    EVAL_FILE,
    METRICS_FILE,
    ROLLOUTS_FILE,
    RUNTIME_FILE,
    SUMMARY_FILE,
    JsonlLog,
    describe_runtime,
    write_json_atomic,
)
from trainer.schedule import Schedule

# Keys of an eval record that go into summary.json's final_eval (samples are kept apart).
EVAL_SUMMARY_KEYS = ("step", "phase", "exact_match", "valid_rate", "reward_mean", "count")
# Kept too when the evaluation sampled k completions per prompt (grpo.eval_k).
SAMPLED_SUMMARY_KEYS = ("k", "pass_at_1", "pass_at_k", "mean_at_k")
# environment tasks, with `statuses` (how the held-out episodes ended: episodes per status)
EPISODE_SUMMARY_KEYS = ("success_rate", "turns_mean", "env_step_s", "env_errors")
ETA_WINDOW = 20  # recent steps per phase whose mean duration predicts the rest


class RunLimits(Protocol):
    """The shares past which a finished run carries warnings (`PoolConfig` has them)."""

    max_dropped_share: float
    max_reward_wait_share: float


class RecordSink(Protocol):
    """Something else fed every record (the loggers of `service.loggers`)."""

    def start(self, from_step: int | None) -> None: ...
    def step(self, record: Mapping[str, Any]) -> None: ...
    def evaluation(self, record: Mapping[str, Any]) -> None: ...
    def rollouts(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None: ...


def dropped_groups(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Over the run's GRPO steps: groups dropped because a reward failed (error, timeout), steps
    with no update at all and the reason of the first failed reward, so a run that trained on part
    of its data says so, and why."""

    def total(key: str) -> int:
        return int(sum(r.get(key) or 0 for r in rows if r.get("phase") == "grpo"))

    reasons = (
        reason for r in rows if r.get("phase") == "grpo" for reason in r.get("reward_failure_reasons") or ()
    )
    return {
        "reward_failed_groups": total("unusable_groups"),
        "groups": total("groups"),
        "skipped_steps": sum(1 for r in rows if r.get("phase") == "grpo" and r.get("skip_reason")),
        "first_reward_failure": next(reasons, None),  # why the first failed reward failed
    }


def compact_eval(record: dict[str, Any] | None) -> dict[str, Any] | None:
    if record is None:
        return None
    sampled = {k: record[k] for k in (*SAMPLED_SUMMARY_KEYS, *EPISODE_SUMMARY_KEYS) if k in record}
    if "success_rate" in record and "statuses" in record:  # episodes
        sampled["statuses"] = record["statuses"]
    return {**{k: record.get(k) for k in EVAL_SUMMARY_KEYS}, **sampled}


class RunRecorder:
    """Writes metrics.jsonl / eval.jsonl / summary.json, feeds the sinks and the console."""

    def __init__(
        self,
        run_dir: str | Path,
        run_id: str,
        schedule: Schedule,
        console: Console | None = None,
        *,
        out: TextIO | None = None,
        sinks: Sequence[RecordSink] = (),
        pool_health: Callable[[], dict[str, Any]] | None = None,
        limits: RunLimits | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.schedule = schedule
        self.total_steps = schedule.total
        self.console: Console = console if console is not None else PlainConsole(out)
        self.sinks = list(sinks)
        self.pool_health = pool_health
        self.limits = limits  # None: the pool's defaults
        self.metrics = JsonlLog(self.run_dir / METRICS_FILE)
        self.evals = JsonlLog(self.run_dir / EVAL_FILE)
        self.rollouts = JsonlLog(self.run_dir / ROLLOUTS_FILE)
        self.started = time.time()
        self.last_step = 0
        self.resumed_from: int | None = None
        self.last_checkpoint: str | None = None
        self.error: str | None = None
        self._pool_totals: dict[str, Any] = {}
        self._workers_alive: float | None = None  # last count reported, to say when it changes
        self._durations: dict[str, deque[float]] = {
            "sft": deque(maxlen=ETA_WINDOW),
            "grpo": deque(maxlen=ETA_WINDOW),
        }

    def print(self, line: str) -> None:
        """A line about the run as a whole (a stop request, a start)."""
        self.console.header(line)

    def warn(self, text: str) -> None:
        self.console.warning(text)

    # ------------------------------------------------------------------ events
    def handle(self, kind: str, record: dict[str, Any]) -> None:
        handler = {
            START: self._on_start,
            STEP: self._on_step,
            EVAL: self._on_eval,
            CHECKPOINT: self._on_checkpoint,
            ROLLOUTS: self._on_rollouts,
        }
        if kind == ERROR:
            self.error = str(record.get("reason"))
            self.warn(f"error at step {record.get('step')}: {self.error}")
        elif kind in handler:
            handler[kind](record)

    def _on_start(self, record: dict[str, Any]) -> None:
        from_step = record.get("from_step")
        dropped = self.metrics.truncate_after(from_step) + self.evals.truncate_after(from_step)
        self.rollouts.truncate_after(from_step)  # a resumed run writes those steps' completions again
        self.last_step = from_step or 0
        self._pool_totals = pool_totals(self.metrics.rows())
        for sink in self.sinks:
            sink.start(from_step)
        runtime = record.get("runtime")
        if runtime:
            write_json_atomic(self.run_dir / RUNTIME_FILE, runtime)
            self.console.detail(f"[train] runtime: {describe_runtime(runtime)}")
        if from_step:
            self.resumed_from = from_step
            self.print(
                f"[train] resuming from the checkpoint of step {from_step} ({dropped} later records dropped)"
            )
        else:
            self.print(
                f"[train] starting at step 1 of {self.total_steps} on {record.get('world_size')} worker(s)"
            )

    def _on_step(self, record: dict[str, Any]) -> None:
        self.metrics.append(record)
        for sink in self.sinks:
            sink.step(record)
        step, phase = int(record["step"]), str(record["phase"])
        self.last_step = step
        duration = record.get("step_time_s")
        if isinstance(duration, int | float):
            self._durations[phase].append(float(duration))
        self._pool_totals = pool_totals([record], self._pool_totals)
        self._say_pool_size(record)
        pool = dict(self._pool_totals)
        if self.pool_health is not None:
            pool.update(self.pool_health())
        progress = step_progress(self.run_id, self.total_steps, record, self.eta_s(step), pool)
        self.console.step(progress)

    def _say_pool_size(self, record: dict[str, Any]) -> None:
        """A warning each time the number of reward workers taking work changes: the run goes on
        with fewer (their chunks went to the others) or has them back."""
        alive, total = record.get("pool_workers_alive"), record.get("pool_workers")
        if not isinstance(alive, int | float) or not isinstance(total, int | float):
            return
        before, self._workers_alive = self._workers_alive, alive
        if alive == before or (before is None and alive == total):
            return
        if alive == 0:
            self.warn(
                f"[pool] none of the {total:.0f} reward workers takes work at step {record['step']}: "
                "their chunks wait for one to come back (pool.restart_timeout_s)"
            )
        elif alive < total:
            self.warn(
                f"[pool] {alive:.0f} of {total:.0f} reward workers take work at step {record['step']}: "
                "the run goes on with fewer (their chunks went to the others)"
            )
        else:
            self.print(f"[pool] all {total:.0f} reward workers take work again at step {record['step']}")

    def _on_eval(self, record: dict[str, Any]) -> None:
        self.evals.append(record)
        for sink in self.sinks:
            sink.evaluation(record)
        progress = eval_progress(self.run_id, self.total_steps, record, self.eta_s(int(record["step"])))
        self.console.evaluation(progress, record)

    def _on_rollouts(self, record: dict[str, Any]) -> None:
        step, rows = record["step"], record.get("rows", ())
        for row in rows:
            self.rollouts.append({"step": step, **row})
        for sink in self.sinks:
            sink.rollouts(int(step), rows)

    def _on_checkpoint(self, record: dict[str, Any]) -> None:
        self.last_checkpoint = str(record.get("name"))
        self.console.detail(f"[train] checkpoint {self.last_checkpoint} saved")

    def eta_s(self, step: int) -> float | None:
        """Seconds left: remaining steps of each phase times that phase's recent mean step time."""
        eta = 0.0
        for phase, remaining in self.schedule.remaining(step).items():
            if remaining:
                recent = self._durations[phase]
                if not recent:
                    return None
                eta += remaining * sum(recent) / len(recent)
        return eta

    # ------------------------------------------------------------------ summary
    def summary(self, status: str, error: str | None = None) -> dict[str, Any]:
        """summary.json's content (also printed as the `[grpo-summary]` line, without samples)."""
        evals = self.evals.rows()
        grpo_start = next((e for e in evals if e.get("kind") == "start"), None)
        final = evals[-1] if evals else None
        summary: dict[str, Any] = {
            "run_id": self.run_id,
            "status": status,
            "steps": self.last_step,
            "total_steps": self.total_steps,
            "sft_steps": min(self.last_step, self.schedule.sft_steps),
            "grpo_steps": max(0, self.last_step - self.schedule.sft_steps),
            "final_eval": compact_eval(final),
            "grpo_start_eval": compact_eval(grpo_start),
            "error": error,
            "wall_time_s": time.time() - self.started,
            "started_at": dt.datetime.fromtimestamp(self.started, dt.UTC).isoformat(),
            "finished_at": dt.datetime.now(dt.UTC).isoformat(),
            "resumed_from": self.resumed_from,
            "last_checkpoint": self.last_checkpoint,
            "run_dir": str(self.run_dir),
            **dropped_groups(self.metrics.rows()),
            "warnings": self.warnings() if status != "failed" else [],
        }
        if final and grpo_start and final is not grpo_start:
            summary["gain"] = {
                k: final[k] - grpo_start[k]
                for k in ("reward_mean", "exact_match", "valid_rate", "success_rate", "turns_mean")
                if isinstance(final.get(k), int | float) and isinstance(grpo_start.get(k), int | float)
            }
        return summary

    def warnings(self) -> list[str]:
        """What the run's records say beside `succeeded` (`failure_policy.run_warnings`)."""
        limits = self.limits
        if limits is None:
            from actors.pool.config import PoolConfig

            limits = PoolConfig()
        return run_warnings(
            RunTotals.of_records(self.metrics.rows()),
            max_dropped_share=limits.max_dropped_share,
            max_reward_wait_share=limits.max_reward_wait_share,
        )

    def finish(
        self, status: str, error: str | None = None, reports: Callable[[], list[str]] | None = None
    ) -> dict[str, Any]:
        """Write summary.json, then the reports (`reports()` draws them and returns their file
        names), then tell the console; returns the summary."""
        summary = self.summary(status, error)
        if final_samples := (self.evals.rows() or [{}])[-1].get("samples"):
            write_json_atomic(self.run_dir / SUMMARY_FILE, {**summary, "final_samples": final_samples})
        else:
            write_json_atomic(self.run_dir / SUMMARY_FILE, summary)
        drawn = reports() if reports is not None else []
        written = [ROLLOUTS_FILE] if self.rollouts.path.exists() else []
        self.console.summary(summary, written + drawn)
        return summary
