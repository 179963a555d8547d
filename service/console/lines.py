"""The words of the console: one line per step, per evaluation, per warning, and the summary.

Pure functions of the records, shared by the live display (a terminal) and the plain lines (a
job log), so both say the same thing the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRAIN_TAG = "[train]"
EVAL_TAG = "[eval]"


def duration(seconds: float | None) -> str:
    """`42s`, `3m05s`, `1h02m`; `?` when unknown."""
    if seconds is None:
        return "?"
    seconds = int(round(max(0.0, seconds)))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def number(value: Any, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if _is_number(value) else "-"


def percent(value: Any) -> str:
    return f"{100 * value:.1f}%" if _is_number(value) else "-"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def step_fields(progress: Mapping[str, Any]) -> str:
    """`loss 0.1234  reward 0.512  kl 0.0012  0.95 s/step` of a step's progress record."""
    parts = [f"loss {number(progress.get('loss'))}"]
    if progress.get("phase") == "grpo":
        parts.append(f"reward {number(progress.get('reward_mean'), 3)}")
        parts.append(f"kl {number(progress.get('kl'))}")
    parts.append(f"{number(progress.get('step_time_s'), 2)} s/step")
    if progress.get("skip_reason"):
        parts.append(f"skipped: {progress['skip_reason']}")
    return "  ".join(parts)


def step_line(progress: Mapping[str, Any]) -> str:
    return (
        f"{TRAIN_TAG} step {progress['step']}/{progress['total_steps']} {progress['phase']}  "
        f"{step_fields(progress)}  eta {duration(progress.get('eta_s'))}"
    )


def eval_line(record: Mapping[str, Any]) -> str:
    line = (
        f"{EVAL_TAG} step {record['step']} ({record.get('kind')}, {record.get('phase')} policy): "
        f"reward {number(record.get('reward_mean'), 3)}  exact {percent(record.get('exact_match'))}  "
        f"valid {percent(record.get('valid_rate'))}  on {record.get('count')} held-out prompts"
    )
    if "success_rate" in record:  # episodes with an environment: how they ended, by status
        ended = ", ".join(f"{status} {count}" for status, count in (record.get("statuses") or {}).items())
        line += (
            f"; episodes: success {percent(record.get('success_rate'))}  turns {number(record.get('turns_mean'), 2)}  "
            f"ended {ended or '-'}"
        )
    if "k" in record:  # k completions sampled per prompt as well
        line += (
            f"; k={record['k']}: pass@1 {percent(record.get('pass_at_1'))}  "
            f"pass@k {percent(record.get('pass_at_k'))}  mean@k {number(record.get('mean_at_k'), 3)}"
        )
    return line


def sample_lines(record: Mapping[str, Any]) -> list[str]:
    return [
        f"{EVAL_TAG}   {s.get('prompt')!r} -> {s.get('completion')!r} (reward {number(s.get('reward'), 3)})"
        for s in record.get("samples") or []
    ]


def _held_out(summary: Mapping[str, Any]) -> str | None:
    start, final = summary.get("grpo_start_eval") or {}, summary.get("final_eval") or {}
    if not final:
        return None
    if not start or start.get("step") == final.get("step"):
        return (
            f"held-out reward {number(final.get('reward_mean'), 3)}, exact {percent(final.get('exact_match'))}, "
            f"valid {percent(final.get('valid_rate'))}"
        )
    gain = (summary.get("gain") or {}).get("reward_mean")
    signed = f" ({gain:+.3f})" if _is_number(gain) else ""
    line = (
        f"held-out reward {number(start.get('reward_mean'), 3)} -> {number(final.get('reward_mean'), 3)}{signed}, "
        f"exact {percent(start.get('exact_match'))} -> {percent(final.get('exact_match'))}, "
        f"valid {percent(start.get('valid_rate'))} -> {percent(final.get('valid_rate'))}"
    )
    if "success_rate" in final:
        line += (
            f", success {percent(start.get('success_rate'))} -> {percent(final.get('success_rate'))}, "
            f"turns {number(start.get('turns_mean'), 2)} -> {number(final.get('turns_mean'), 2)}"
        )
    return line


def summary_lines(summary: Mapping[str, Any], reports: list[str]) -> list[str]:
    """What a person reads at the end: outcome, held-out gain, where the records are."""
    head = (
        f"{TRAIN_TAG} run {summary.get('run_id')} {summary.get('status')}: step {summary.get('steps')}/"
        f"{summary.get('total_steps')} in {duration(summary.get('wall_time_s'))}"
    )
    if summary.get("error"):
        head += f"; {summary['error']}"
    warnings = list(summary.get("warnings") or [])
    if warnings:
        head += f" with {len(warnings)} warning{'s' if len(warnings) > 1 else ''}"
    lines = [head, *(f"{TRAIN_TAG} warning: {w}" for w in warnings)]
    if summary.get("reward_failed_groups") or summary.get("skipped_steps"):
        lines.append(
            f"{TRAIN_TAG} rewards failed in {summary.get('reward_failed_groups', 0)} of {summary.get('groups', 0)} "
            f"GRPO groups (dropped from the loss); {summary.get('skipped_steps', 0)} steps without an update"
            + (
                f"; first reason: {summary['first_reward_failure']}"
                if summary.get("first_reward_failure")
                else ""
            )
        )
    held_out = _held_out(summary)
    if held_out:
        lines.append(f"{TRAIN_TAG} {held_out}")
    files = ", ".join(["metrics.jsonl", "eval.jsonl", "summary.json", *reports])
    lines.append(f"{TRAIN_TAG} records in {summary.get('run_dir')}: {files}")
    return lines
