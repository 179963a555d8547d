"""The one-line records a run prints to its job log, and how to read them back.

The client knows a remote run only through the Ray Jobs API (status and logs; no shared
filesystem), so the driver prints a machine-readable line per step and one at the end:

    [grpo-progress] {"run_id": ..., "step": 12, "total_steps": 40, "phase": "grpo", ...}
    [grpo-summary] {"status": "succeeded", "steps": 40, "final_eval": {...}, ...}

Progress keys: run_id, step, total_steps, phase ("sft" | "grpo" | "eval"), loss, reward_mean
(GRPO only), step_time_s, eta_s. Everything after the prefix is one JSON object.
"""

from __future__ import annotations

import json
from typing import Any

PROGRESS_PREFIX = "[grpo-progress] "
SUMMARY_PREFIX = "[grpo-summary] "


def format_record(prefix: str, record: dict[str, Any]) -> str:
    return prefix + json.dumps(record, separators=(",", ":"), default=float)


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
