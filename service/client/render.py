"""Plain-text tables for the command line (the `--json` output is `to_dict()` as is). Every
figure says the step it comes from: a job log carries them every few seconds, not every step."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from service.client.states import RunInfo, RunStatus


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _when(moment: dt.datetime | None) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") if moment else "-"


def _number(value: float) -> str:
    return f"{value:.4g}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = [headers, *rows]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                     for line in lines)  # fmt: skip


def status_table(status: RunStatus) -> str:
    step = "-" if status.step is None else f"{status.step}/{status.total_steps or '?'}"
    if status.progress is not None:
        step += f" ({status.progress:.0%})"
    elapsed = None
    if status.started_at:
        end = status.ended_at or dt.datetime.now(dt.UTC)
        elapsed = (end - status.started_at).total_seconds()
    rows = [
        ("run", status.run_id),
        ("state", status.state.value),
        ("phase", status.phase or "-"),
        ("step", step),
        ("started", _when(status.started_at)),
        ("elapsed", _duration(elapsed)),
    ]
    if not status.state.is_terminal():
        rows.append(("eta", _duration(status.eta_s)))
    at = "" if status.metrics_step is None else f" (step {status.metrics_step})"
    rows += [(name, _number(value) + at) for name, value in sorted(status.metrics.items())]
    rows += [(name, value + at) for name, value in pool_rows(status.pool)]
    rows += held_out_rows(status)
    if status.error:
        rows.append(("error", status.error))
    rows += [("warning", w) for w in status.warnings]
    return table(("field", "value"), rows)


def pool_rows(pool: dict[str, Any]) -> list[tuple[str, str]]:
    """The reward pool's health: workers alive, restarts, recycles, timeouts, errors, the largest
    worker RSS, the placement decision."""
    rows = []
    if "workers" in pool:
        rows.append(
            ("pool.workers", f"{_count(pool.get('workers_alive'))} of {_count(pool['workers'])} alive")
        )
    for key in ("worker_restarts", "recycled", "timeouts", "errors", "retries"):
        if key in pool:
            rows.append((f"pool.{key}", _count(pool[key])))
    if _is_number(pool.get("worker_rss_mb_max")):
        rows.append(("pool.worker_rss_mb_max", f"{pool['worker_rss_mb_max']:.0f} MB"))
    if pool.get("placement") is not None:
        rows.append(("pool.placement", _placement(pool["placement"])))
    return rows


def held_out_rows(status: RunStatus) -> list[tuple[str, str]]:
    """The latest held-out figures (the final ones once the run has them), by game length when given."""
    evaluation = status.final_eval or status.eval_metrics
    step = evaluation.get("step", status.eval_step)
    at = "" if step is None else f" (step {step})"
    rows = [("eval.step", str(step))] if step is not None else []
    rows += [
        (f"eval.{name}", _number(value) + at)
        for name, value in sorted(evaluation.items())
        if isinstance(value, int | float) and not isinstance(value, bool) and name not in ("step", "count")
    ]
    for name, groups in sorted(status.eval_details.items()):
        for group, figures in groups.items():
            if isinstance(figures, dict):
                text = "  ".join(f"{k} {_number(v)}" for k, v in figures.items() if _is_number(v))
                rows.append((f"eval.{name}.{group}", text + at))
    return rows


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(value: Any) -> str:
    return str(int(value)) if _is_number(value) else "?"


def _placement(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


CLEAR_SCREEN = "\x1b[H\x1b[2J"  # cursor home, clear: the next frame replaces this one


def watch_frame(status: RunStatus, every_s: float, now: str) -> str:
    """One refresh of `status --watch`: when and how often, then the status table."""
    ending = "the run has ended" if status.state.is_terminal() else "Ctrl-C to stop"
    return f"{status.run_id} at {now}, every {every_s:g}s ({ending})\n{status_table(status)}"


def runs_table(runs: Sequence[RunInfo]) -> str:
    if not runs:
        return "no training runs on this cluster"
    rows = []
    for run in runs:
        elapsed = None
        if run.started_at:
            elapsed = ((run.ended_at or dt.datetime.now(dt.UTC)) - run.started_at).total_seconds()
        rows.append(
            (run.run_id, run.state.value, run.preset or "-", _when(run.started_at), _duration(elapsed))
        )
    return table(("RUN ID", "STATE", "PRESET", "STARTED", "ELAPSED"), rows)
