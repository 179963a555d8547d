"""report.html: one self-contained page per run, drawn from its records alone.

    outcome      status, steps, wall time, held-out reward at the GRPO start and at the end
    evaluations  every held-out evaluation (step, kind, policy, reward, exact match, valid rate)
    curves       report.png, embedded (drawn first if missing)
    by length    the held-out figures by game length (plies) of the first and the last evaluation
    samples      each evaluation's sample completions: prompt, completion, target, reward, status,
                 and for chess the target and completion boards (python-chess SVG), differences marked;
                 an environment's infos (its turns', its episodes') where it gave any
    config       the resolved config.yaml

No scripts, no files beside it, nothing fetched: it opens anywhere. Cells carry `data-field`
attributes so tests can read back what the page shows.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from service.report.boards import board_svg, figures_by_length
from service.report.plot import write_report
from service.run_files import (
    CONFIG_FILE,
    EVAL_FILE,
    METRICS_FILE,
    REPORT_FILE,
    ROLLOUTS_FILE,
    SUMMARY_FILE,
    read_jsonl,
)

HTML_FILE = "report.html"
GAME_TASK = "fen"  # the task whose prompts are move lists: its figures by game length
STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;
vertical-align:top;font-size:13px}th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font-family:ui-monospace,monospace;font-size:12px}td code{word-break:break-all}
td[data-field=env_info] code{white-space:pre-wrap}
.status-succeeded{color:#2a7}.status-failed{color:#c22}.status-stopped{color:#c80}
.boards{display:flex;gap:6px}.boards figure{margin:0}.boards figcaption{font-size:11px;color:#666}
img.curves{max-width:100%;border:1px solid #eee}
"""


def esc(value: Any) -> str:
    return html.escape("-" if value is None else str(value))


def fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    return f"{value:.{digits}f}"


def pct(value: Any) -> str:
    return "-" if isinstance(value, bool) or not isinstance(value, int | float) else f"{100 * value:.1f}%"


def _cell(field: str, text: str, numeric: bool = False) -> str:
    return f'<td data-field="{field}"{" class=num" if numeric else ""}>{text}</td>'


def _table(headers: Sequence[str], rows: Iterable[str], name: str) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f'<table data-table="{name}"><tr>{head}</tr>{"".join(rows)}</table>'


def outcome_section(summary: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]]) -> str:
    status = summary.get("status", "unknown (no summary.json: the run is going on or was killed)")
    steps = summary.get("steps", metrics[-1]["step"] if metrics else 0)
    start, final = summary.get("grpo_start_eval") or {}, summary.get("final_eval") or {}
    rows = [
        ("status", f'<span class="status-{esc(status)}">{esc(status)}</span>'),
        ("steps", f"{esc(steps)} of {esc(summary.get('total_steps', '?'))}"),
        ("wall time", f"{fmt(summary.get('wall_time_s'), 0)} s"),
        ("held-out reward", f"{fmt(start.get('reward_mean'))} at the GRPO start, {fmt(final.get('reward_mean'))} at the end"),
        ("held-out exact match", f"{pct(start.get('exact_match'))} -> {pct(final.get('exact_match'))}"),
        ("held-out valid rate", f"{pct(start.get('valid_rate'))} -> {pct(final.get('valid_rate'))}"),
    ]  # fmt: skip
    if "success_rate" in final:  # episodes with an environment
        rows.append(
            ("held-out success", f"{pct(start.get('success_rate'))} -> {pct(final.get('success_rate'))}")
        )
        rows.append(
            ("turns per episode", f"{fmt(start.get('turns_mean'))} -> {fmt(final.get('turns_mean'))}")
        )
    if summary.get("error"):
        rows.append(("error", f"<code>{esc(summary['error'])}</code>"))
    body = "".join(f'<tr><th>{esc(k)}</th><td data-field="{esc(k)}">{v}</td></tr>' for k, v in rows)
    return f'<h2>Outcome</h2><table data-table="outcome">{body}</table>'


def evaluations_section(evals: Sequence[Mapping[str, Any]]) -> str:
    episodes = any("success_rate" in e for e in evals)  # an environment task: its episode figures too
    rows = (
        f'<tr data-step="{esc(e.get("step"))}">{_cell("step", esc(e.get("step")), True)}'
        f"{_cell('kind', esc(e.get('kind')))}{_cell('phase', esc(e.get('phase')))}"
        f"{_cell('reward_mean', fmt(e.get('reward_mean')), True)}{_cell('exact_match', pct(e.get('exact_match')), True)}"
        f"{_cell('valid_rate', pct(e.get('valid_rate')), True)}{_cell('count', esc(e.get('count')), True)}"
        + (
            f"{_cell('success_rate', pct(e.get('success_rate')), True)}{_cell('turns_mean', fmt(e.get('turns_mean')), True)}"
            f"{_cell('env_step_s', fmt(e.get('env_step_s'), 6), True)}{_cell('env_errors', esc(e.get('env_errors')), True)}"
            if episodes else ""
        )
        + "</tr>"
        for e in evals
    )  # fmt: skip
    headers = ("step", "kind", "policy", "reward", "exact match", "valid", "positions") + (
        ("success", "turns", "env s per call", "env errors") if episodes else ()
    )
    return "<h2>Held-out evaluations</h2>" + _table(headers, rows, "evaluations")


def curves_section(run_dir: Path) -> str:
    png = run_dir / REPORT_FILE
    if not png.exists():
        write_report(run_dir)
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return f'<h2>Curves</h2><img class="curves" alt="training curves" src="data:image/png;base64,{data}">'


def pool_section(metrics: Sequence[Mapping[str, Any]]) -> str:
    """An autoscaled pool's changes (`pool.autoscale`): each one, with the steps it ran for."""
    changes = [r for r in metrics if "pool_resized_to" in r]
    if not changes:
        return ""
    last = metrics[-1]["step"]
    ends = [c["step"] - 1 for c in changes[1:]] + [last]
    rows = [
        "<tr>"
        + _cell("decided_after", esc(int(c["pool_resize_step"])), True)
        + _cell("steps", f"{esc(c['step'])}-{esc(end)}")
        + _cell("workers_from", esc(int(c["pool_resized_from"])), True)
        + _cell("workers_to", esc(int(c["pool_resized_to"])), True)
        + _cell("why", esc(c.get("pool_resize_why", "")))
        + "</tr>"
        for c, end in zip(changes, ends, strict=True)
    ]
    headers = ("decided after step", "steps at that size", "workers from", "workers to", "why")
    return "<h2>Reward pool size</h2>" + _table(headers, rows, "pool")


def by_length_section(evals: Sequence[Mapping[str, Any]], task: str = GAME_TASK) -> str:
    """The held-out figures by game length (plies) of the first and the last evaluation; nothing
    for a task whose prompts are not move lists."""
    if task != GAME_TASK:
        return ""
    if not evals:
        return "<h2>Held-out figures by game length</h2><p>No evaluation yet.</p>"
    chosen = [evals[0]] if len(evals) == 1 else [evals[0], evals[-1]]
    tables = [(record, *figures_by_length(record)) for record in chosen]
    parts = ["<h2>Held-out figures by game length</h2>"]
    for record, rows, source in tables:
        body = (
            f'<tr data-length="{esc(r.length)}">{_cell("length", esc(r.length), True)}'
            f"{_cell('count', esc(r.count), True)}{_cell('reward_mean', fmt(r.reward_mean), True)}"
            f"{_cell('exact_match', pct(r.exact_match), True)}{_cell('valid_rate', pct(r.valid_rate), True)}</tr>"
            for r in rows
        )
        parts.append(
            f"<h3>step {esc(record.get('step'))} ({esc(record.get('kind'))}, {esc(record.get('phase'))} policy), "
            f"from {esc(source)}</h3>"
        )
        parts.append(_table(("plies", "positions", "reward", "exact match", "valid"), body, "by-length"))
    return "".join(parts)


def _boards(sample: Mapping[str, Any]) -> str:
    target = board_svg(sample.get("target"))
    if target is None:
        return "-"
    completion = board_svg(sample.get("completion"), against=sample.get("target"))
    second = completion if completion is not None else "<p>not a position</p>"
    return (
        f'<div class="boards"><figure>{target}<figcaption>target</figcaption></figure>'
        f"<figure>{second}<figcaption>completion</figcaption></figure></div>"
    )


def _code(value: Any) -> str:
    return f"<code>{esc(value)}</code>"


def _turn_infos(sample: Mapping[str, Any]) -> str:
    """An episode's turns' infos (`env_info`), one line of JSON per turn, then what the environment
    said at its end (`env_episode_info`)."""
    lines = [json.dumps(info, sort_keys=True) for info in sample.get("env_info") or []]
    if sample.get("env_episode_info"):
        lines.append("episode: " + json.dumps(sample["env_episode_info"], sort_keys=True))
    return _code("\n".join(lines)) if lines else ""


def _sample_row(step: Any, sample: Mapping[str, Any], with_info: bool) -> str:
    cells = [
        _cell("prompt", _code(sample.get("prompt"))),
        _cell("completion", _code(sample.get("completion"))),
        _cell("target", _code(sample.get("target"))),
        _cell("reward", fmt(sample.get("reward")), True),
        _cell("status", esc(sample.get("status"))),
        _cell("boards", _boards(sample)),
    ]
    if with_info:
        cells.append(_cell("env_info", _turn_infos(sample)))
    return f'<tr data-step="{esc(step)}">{"".join(cells)}</tr>'


def samples_section(evals: Sequence[Mapping[str, Any]]) -> str:
    parts = ["<h2>Sample completions</h2>"]
    for record in evals:
        samples = record.get("samples") or []
        with_info = any(s.get("env_info") or s.get("env_episode_info") for s in samples)  # an environment's
        rows = (_sample_row(record.get("step"), s, with_info) for s in samples)
        parts.append(
            f"<h3>step {esc(record.get('step'))} ({esc(record.get('kind'))}, {esc(record.get('phase'))} policy)</h3>"
        )
        headers = ("prompt", "completion", "target", "reward", "status", "boards")
        parts.append(_table((*headers, "environment's info") if with_info else headers, rows, "samples"))
    return "".join(parts)


def _rollout_row(row: Mapping[str, Any], logged: Sequence[str]) -> str:
    """One completion's cells, then one per column the rewards logged with log_extra (`logged`)."""
    extra = row.get("log_extra") or {}
    cells = [
        _cell("group", esc(row.get("group")), True),
        _cell("prompt", _code(row.get("prompt"))),
        _cell("completion", _code(row.get("completion"))),
        _cell("reward", fmt(row.get("reward")), True),
        _cell("status", esc(row.get("status"))),
        _cell("advantage", fmt(row.get("advantage"), 2), True),
        _cell("in_loss", "yes" if row.get("in_loss") else "no"),
        *(_cell("log_extra", "-" if extra.get(c) is None else _code(str(extra[c]))) for c in logged),
    ]
    return f'<tr data-step="{esc(row.get("step"))}">{"".join(cells)}</tr>'


def rollouts_section(rollouts: Sequence[Mapping[str, Any]]) -> str:
    """The first and the last training step recorded in rollouts.jsonl (`logging.rollouts_every`);
    nothing when the run recorded none."""
    steps = sorted({row["step"] for row in rollouts if isinstance(row.get("step"), int)})
    if not steps:
        return ""
    parts = ["<h2>Training completions</h2>"]
    headers = ("group", "prompt", "completion", "reward", "status", "advantage", "in loss")
    for step in dict.fromkeys((steps[0], steps[-1])):
        rows = [r for r in rollouts if r.get("step") == step]
        logged = list(dict.fromkeys(c for r in rows for c in r.get("log_extra") or {}))  # TRL's log_extra
        parts.append(f"<h3>GRPO step {step}</h3>")
        parts.append(_table((*headers, *logged), (_rollout_row(r, logged) for r in rows), "rollouts"))
    return "".join(parts)


def config_section(run_dir: Path) -> str:
    path = run_dir / CONFIG_FILE
    text = path.read_text(encoding="utf-8") if path.exists() else "(no config.yaml)"
    return f"<h2>Config</h2><details open><summary>{CONFIG_FILE}</summary><pre class='config'>{esc(text)}</pre></details>"


def _task_name(run_dir: Path) -> str:
    """The run's task from its config.yaml (the default task when the file is missing or unreadable)."""
    try:
        config = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8")) or {}
        return str((config.get("task") or {}).get("name") or GAME_TASK)
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        return GAME_TASK


def _summary(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def render_html(run_dir: str | Path, title: str | None = None) -> str:
    run_dir = Path(run_dir)
    metrics, evals = read_jsonl(run_dir / METRICS_FILE), read_jsonl(run_dir / EVAL_FILE)
    summary = _summary(run_dir)
    name = title or summary.get("run_id") or run_dir.name
    sections = (
        outcome_section(summary, metrics),
        evaluations_section(evals),
        curves_section(run_dir),
        pool_section(metrics),
        by_length_section(evals, _task_name(run_dir)),
        samples_section(evals),
        rollouts_section(read_jsonl(run_dir / ROLLOUTS_FILE)),
        config_section(run_dir),
    )
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(name)}</title>'
        f"<style>{STYLE}</style></head><body><h1>GRPO run {esc(name)}</h1>{''.join(sections)}</body></html>\n"
    )


def write_html_report(run_dir: str | Path, title: str | None = None) -> Path:
    """Write run_dir/report.html; returns its path."""
    path = Path(run_dir) / HTML_FILE
    path.write_text(render_html(run_dir, title), encoding="utf-8")
    return path
