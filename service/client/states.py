"""What the client reports about a run, built from the Jobs API alone (job info + job logs).

Ray's job status says whether the driver process is pending, running or over; the run's own
log lines (`service.progress`) say where training is and, at the end, how it ended. A run's
state is Ray's, refined by the summary line where Ray cannot know better (a driver that exits
0 after writing `"status": "failed"` is a failed run); an ended run's step is its summary's.
A job log carries a step's figures every `run.log_interval_s` seconds (and at the end), so the
figures a status shows name the step they come from (`metrics_step`, `eval_step`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from enum import Enum, StrEnum
from typing import Any

from service.progress import PROGRESS_PREFIX, SUMMARY_PREFIX, last_record


class RunState(StrEnum):
    """A run's state (a `str`: compares equal to its name, e.g. `"RUNNING"`)."""

    PENDING = "PENDING"  # accepted; waiting for resources or for its runtime env
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"  # stopped on request (`stop()` / `ray job stop`)

    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @classmethod
    def from_ray(cls, ray_status: str) -> RunState:
        """Map a Ray `JobStatus` name; raises ValueError naming the unknown one."""
        try:
            return cls(str(getattr(ray_status, "value", ray_status)).upper())
        except ValueError:
            allowed = ", ".join(state.value for state in cls)
            raise ValueError(f"unknown Ray job status {ray_status!r}; expected one of {allowed}") from None


_TERMINAL = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.STOPPED})
_SUMMARY_STATES = {"succeeded": RunState.SUCCEEDED, "failed": RunState.FAILED, "stopped": RunState.STOPPED}
# Progress keys that say where the run is; every other numeric key is a metric.
_POSITION_KEYS = frozenset({"run_id", "step", "total_steps", "phase", "eta_s"})
EVAL_PHASE = "eval"  # progress lines of held-out evaluations; every other phase is a training step


@dataclass(frozen=True)
class RunInfo:
    """One line of `list()`: what job info alone says about a run (no logs are read)."""

    run_id: str
    state: RunState
    preset: str | None
    started_at: dt.datetime | None
    ended_at: dt.datetime | None

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))


@dataclass(frozen=True)
class RunStatus:
    """Where a run stands: Ray's state plus the latest progress and summary lines of its log."""

    run_id: str
    state: RunState
    phase: str | None = None  # of the latest progress line: "sft" | "grpo" | "eval"
    step: int | None = None  # the latest step the log tells of (the summary's, once there is one)
    total_steps: int | None = None
    metrics: dict[str, float] = field(
        default_factory=dict
    )  # latest step's: loss, reward_mean, step_time_s, ...
    metrics_step: int | None = None  # the step those figures (and `pool`) come from
    eval_metrics: dict[str, float] = field(default_factory=dict)  # latest held-out eval: exact_match, ...
    eval_step: int | None = None  # the step of that evaluation
    eval_details: dict[str, Any] = field(default_factory=dict)  # its nested figures (e.g. by game length)
    pool: dict[str, Any] = field(default_factory=dict)  # reward pool health: workers_alive, timeouts, ...
    eta_s: float | None = None
    error: str | None = None  # why a FAILED run failed, in one line
    warnings: list[str] = field(default_factory=list)  # what a finished run says beside its state
    final_eval: dict[str, Any] | None = None  # from the summary line, once there is one
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None

    @property
    def progress(self) -> float | None:
        """Fraction of steps done, in [0, 1] (None before the first step is logged)."""
        if self.step is None or not self.total_steps:
            return None
        return min(1.0, self.step / self.total_steps)

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self) | {"progress": self.progress})


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in data.items():
        if isinstance(value, Enum):
            value = value.value
        elif isinstance(value, dt.datetime):
            value = value.isoformat()
        out[key] = value
    return out


def timestamp(ms: int | None) -> dt.datetime | None:
    """Ray's job times are epoch milliseconds (0 or None when not reached yet)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC) if ms else None


def _failure_line(ray_message: str | None, logs: str) -> str:
    """One line saying why the driver failed: Ray's first line, plus the log's last line.

    Ray's message for a failed entrypoint embeds the log tail; the last non-blank log line is
    usually the error the driver printed (`python -m service.train` prints one clear line).
    """
    head = (ray_message or "the run failed").strip().splitlines()[0].rstrip(" ,:")
    head = head.split(", last available logs")[0]
    tail = next((line.strip() for line in reversed(logs.splitlines()) if line.strip()), "")
    return f"{head}: {tail}" if tail and tail not in head else head


def _state(ray_state: RunState, summary: dict[str, Any] | None) -> RunState:
    if not ray_state.is_terminal() or summary is None:
        return ray_state
    summary_state = _SUMMARY_STATES.get(str(summary.get("status", "")).lower())
    if ray_state is RunState.SUCCEEDED and summary_state is not None:
        return summary_state  # the driver exited 0 but its own summary knows better
    return ray_state


def _as_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _as_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _latest_progress(logs: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(latest record, latest training-step record, latest eval record), each {} when absent."""
    latest = step = evaluation = None
    for line in reversed(logs.splitlines()):
        if PROGRESS_PREFIX not in line:
            continue
        record = last_record(line, PROGRESS_PREFIX)
        if record is None:
            continue  # a torn line: look further back
        latest = latest or record
        if record.get("phase") == EVAL_PHASE:
            evaluation = evaluation or record
        else:
            step = step or record
        if step is not None and evaluation is not None:
            break
    return latest or {}, step or {}, evaluation or {}


def _metrics(record: dict[str, Any]) -> dict[str, float]:
    return {
        key: number
        for key, value in record.items()
        if key not in _POSITION_KEYS and (number := _as_float(value)) is not None
    }


def status_from_job(
    run_id: str,
    ray_status: str,
    ray_message: str | None,
    logs: str,
    *,
    start_time_ms: int | None = None,
    end_time_ms: int | None = None,
) -> RunStatus:
    """Build a RunStatus from a job's Ray status and message and its (full) log text."""
    progress, step_record, eval_record = _latest_progress(logs)
    summary = last_record(logs, SUMMARY_PREFIX)
    state = _state(RunState.from_ray(ray_status), summary)
    error = None
    if state is RunState.FAILED:
        summary_error = (summary or {}).get("error")
        error = str(summary_error).strip() if summary_error else _failure_line(ray_message, logs)
    phase = progress.get("phase")
    step, total = _as_int(progress.get("step")), _as_int(progress.get("total_steps"))
    if summary is not None and state.is_terminal():  # how the run ended: its summary's count
        step = _as_int(summary.get("steps")) if summary.get("steps") is not None else step
        total = _as_int(summary.get("total_steps")) or total
    return RunStatus(
        run_id=run_id,
        state=state,
        phase=str(phase) if phase is not None else None,
        step=step,
        total_steps=total,
        metrics=_metrics(step_record),
        metrics_step=_as_int(step_record.get("step")),
        eval_metrics=_metrics(eval_record),
        eval_step=_as_int(eval_record.get("step")),
        eval_details={k: v for k, v in eval_record.items() if isinstance(v, dict)},
        pool=dict(step_record.get("pool") or {}),
        eta_s=None if state.is_terminal() else _as_float(progress.get("eta_s")),
        error=error,
        warnings=[str(w) for w in (summary or {}).get("warnings") or []],
        final_eval=(summary or {}).get("final_eval"),
        started_at=timestamp(start_time_ms),
        ended_at=timestamp(end_time_ms),
    )
