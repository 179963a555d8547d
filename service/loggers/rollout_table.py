"""Training completions (`logging.rollouts_every`) as a table a logger shows: W&B's `Table`,
TensorBoard's text (markdown), as TRL's `log_completions` shows them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ROLLOUT_TAG = "train/rollouts"
COLUMNS = ("group", "prompt", "completion", "reward", "status", "advantage", "in_loss")


def columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """COLUMNS, then each column TRL-style rewards logged with `log_extra` (as TRL adds them)."""
    logged = dict.fromkeys(c for row in rows for c in row.get("log_extra") or {})
    return [*COLUMNS, *(c for c in logged if c not in COLUMNS)]


def table_rows(rows: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """One list per completion, in `columns` order (None where a row lacks a logged column)."""
    names = columns(rows)
    return [
        [row.get(c) if c in COLUMNS else (row.get("log_extra") or {}).get(c) for c in names] for row in rows
    ]


def _cell(value: Any) -> str:
    text = "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")  # one markdown cell


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """A markdown table of the rows (TensorBoard's text view renders it)."""
    names = columns(rows)
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    lines += ["| " + " | ".join(_cell(v) for v in values) + " |" for values in table_rows(rows)]
    return "\n".join(lines)
