"""The one-line records a run prints to its job log, and how to read them back.

The client knows a remote run only through the Ray Jobs API (status and logs; no shared
filesystem), so in a job log the driver prints a machine-readable record beside each periodic
progress line, one per evaluation and one at the end (never on a terminal: see
`service.console`):

    [grpo-progress] {"run_id": ..., "step": 12, "total_steps": 40, "phase": "grpo", ...}
    [grpo-summary] {"status": "succeeded", "steps": 40, "final_eval": {...}, ...}

Progress keys: run_id, step, total_steps, phase ("sft" | "grpo" | "eval"), loss, reward_mean and
kl (GRPO only), step_time_s, eta_s, and `pool` (the reward pool's health: workers, workers_alive,
worker_restarts, timeouts, errors, retries, recycled, worker_rss_mb_max, placement, as far as the
records tell). An `eval`
record holds the held-out figures instead. Everything after the prefix is one JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

PROGRESS_PREFIX = "[grpo-progress] "
SUMMARY_PREFIX = "[grpo-summary] "


def format_record(prefix: str, record: dict[str, Any]) -> str:
    return prefix + json.dumps(record, separators=(",", ":"), default=float)


def for_people(chunks: Iterable[str]) -> Iterator[str]:
    """Log text as chunks, without the `[grpo-progress]` records (a line split across chunks is
    held back until it is whole)."""
    pending = ""
    for chunk in chunks:
        pending += chunk
        *whole, pending = pending.split("\n")
        kept = [line + "\n" for line in whole if not line.startswith(PROGRESS_PREFIX)]
        if kept:
            yield "".join(kept)
    if pending and not pending.startswith(PROGRESS_PREFIX):
        yield pending


def last_record(logs: str, prefix: str) -> dict[str, Any] | None:
    """The last well-formed record with `prefix` in `logs` (None when there is none)."""
    for line in reversed(logs.splitlines()):
        start = line.find(prefix)
        if start < 0:
            continue
        try:
            record = json.loads(line[start + len(prefix) :])
        except ValueError:
            continue  # a line cut by log rotation or interleaving: look further back
        if isinstance(record, dict):
            return record
    return None


# ---------------------------------------------------------------------------- building the records

# Step-record keys summed over the run for the client's pool health (name in the record -> in `pool`).
POOL_TOTALS = {
    "scorer_reward_timeouts": "timeouts",
    "scorer_reward_errors": "errors",
    "scorer_reward_retries": "retries",
    "scorer_worker_restarts": "worker_restarts",
    "scorer_worker_recycled": "recycled",
}
# Step-record keys whose latest value describes the pool now.
POOL_LATEST = {
    "pool_workers": "workers",
    "pool_workers_alive": "workers_alive",
    "pool_worker_rss_mb_max": "worker_rss_mb_max",
    "placement": "placement",
}
# Eval-record keys that are not held-out figures.
_EVAL_NOT_FIGURES = frozenset({"step", "phase", "kind", "time", "samples", "eval_time_s"})


def pool_totals(rows: list[dict[str, Any]], totals: dict[str, Any] | None = None) -> dict[str, Any]:
    """The pool's health from step records: counters summed over `rows` (added to `totals`), the
    latest worker counts and placement decision."""
    out = dict(totals or {})
    for row in rows:
        for key, name in POOL_TOTALS.items():
            if isinstance(row.get(key), int | float):
                out[name] = out.get(name, 0) + int(row[key])
        for key, name in POOL_LATEST.items():
            if row.get(key) is not None:
                out[name] = row[key]
    return out


def step_progress(
    run_id: str, total_steps: int, record: dict[str, Any], eta_s: float | None, pool: dict[str, Any]
) -> dict[str, Any]:
    """The `[grpo-progress]` record of a finished step."""
    progress: dict[str, Any] = {
        "run_id": run_id,
        "step": int(record["step"]),
        "total_steps": total_steps,
        "phase": str(record["phase"]),
        "loss": record.get("loss"),
        "step_time_s": record.get("step_time_s"),
        "eta_s": eta_s,
    }
    if progress["phase"] == "grpo":
        progress["reward_mean"] = record.get("reward_mean")
        progress["kl"] = record.get("kl")
        if record.get("skip_reason"):
            progress["skip_reason"] = record["skip_reason"]
    if pool:
        progress["pool"] = pool
    return progress


def eval_progress(
    run_id: str, total_steps: int, record: dict[str, Any], eta_s: float | None
) -> dict[str, Any]:
    """The `[grpo-progress]` record of a held-out evaluation: phase `eval` and every figure it holds
    (exact_match, valid_rate, reward_mean, count, and whatever the task adds, e.g. by game length)."""
    progress: dict[str, Any] = {
        "run_id": run_id,
        "step": int(record["step"]),
        "total_steps": total_steps,
        "phase": "eval",
    }
    progress.update({k: v for k, v in record.items() if k not in _EVAL_NOT_FIGURES})
    progress["eta_s"] = eta_s
    return progress
