"""Plain-text tables for the command line (the `--json` output is `to_dict()` as is)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

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
    rows += [(name, _number(value)) for name, value in sorted(status.metrics.items())]
    evaluation = status.final_eval or status.eval_metrics  # the final one once the run has it
    rows += [
        (f"eval.{name}", _number(value))
        for name, value in sorted(evaluation.items())
        if isinstance(value, int | float) and not isinstance(value, bool) and name not in ("step", "count")
    ]
    if status.error:
        rows.append(("error", status.error))
    return table(("field", "value"), rows)


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
