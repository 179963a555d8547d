"""The run directory's files: JSON-lines logs that a resume truncates, and atomic JSON documents.

    runs/<run_id>/config.yaml     resolved config
                  metrics.jsonl   one object per step: step, phase, loss, step_time_s, reward_mean (GRPO), ...
                  eval.jsonl      one object per held-out evaluation: step, phase, exact_match, valid_rate, reward_mean, ...
                  summary.json    status, steps, final_eval, wall time, error, ...
                  runtime.json    what the config left to the machine, as rank 0 resolved it: precision,
                                  compile, torch threads, OpenMP wait policy
                  checkpoints/    step_<step>/ written through Ray Train
                  report.png      curves of the above

Rows are appended and flushed one by one, so a killed run leaves at most a torn last line;
readers skip it, and a resume drops it along with every row past the checkpoint it resumes from.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.jsonl"
ROLLOUTS_FILE = "rollouts.jsonl"  # training completions, with logging.rollouts_every
SUMMARY_FILE = "summary.json"
RUNTIME_FILE = "runtime.json"
REPORT_FILE = "report.png"
CHECKPOINT_DIR = "checkpoints"


def json_safe(value: Any) -> Any:
    """`value` with non-finite floats as None and tensors/numpy scalars as plain numbers (strict JSON)."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "item"):  # torch / numpy scalar
        return json_safe(value.item())
    return str(value)


def describe_runtime(runtime: Mapping[str, Any]) -> str:
    """One line of runtime.json: 'fp32 (auto: ...), compile off/on, 2 torch threads, OMP_WAIT_POLICY=PASSIVE'."""
    compiled = [k.removesuffix("_compile") for k in ("model_compile", "sampling_compile") if runtime.get(k)]
    decoding = runtime.get("sampling_precision")
    differs = f", decoding in {decoding}" if decoding and decoding != runtime.get("precision") else ""
    attention = f", {runtime['attention']} attention" if runtime.get("attention") else ""
    kept = (
        f"; kept from the checkpoint of step {runtime['kept_from_step']}: {', '.join(runtime.get('kept') or [])}"
        if runtime.get("kept_from_step")
        else ""
    )
    return (
        f"{runtime.get('precision')} ({runtime.get('precision_reason')}){differs}{attention}, "
        f"compile {'+'.join(compiled) if compiled else 'off'}, {runtime.get('torch_threads')} torch threads, "
        f"OMP_WAIT_POLICY={runtime.get('OMP_WAIT_POLICY') or 'unset'}{kept}"
    )


def dumps(record: Mapping[str, Any]) -> str:
    return json.dumps(json_safe(record), separators=(",", ":"), allow_nan=False)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every well-formed object in a JSON-lines file (a torn or foreign line is skipped)."""
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    rows.append(row)
    except FileNotFoundError:
        return []
    return rows


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write via a temporary file and rename: readers see the old or the new file, never half."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: str | Path, document: Mapping[str, Any]) -> None:
    write_text_atomic(path, json.dumps(json_safe(document), indent=2, allow_nan=False) + "\n")


class JsonlLog:
    """An append-only JSON-lines file of records keyed by `step`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, record: Mapping[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(dumps(record) + "\n")
            f.flush()

    def rows(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path)

    def truncate_after(self, step: int | None) -> int:
        """Keep rows with step <= `step` (none when `step` is None); returns how many were dropped.

        Rewritten atomically, so a crash here leaves the old file whole.
        """
        if not self.path.exists():
            return 0
        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = [json.dumps(r, separators=(",", ":")) for r in _rows_up_to(lines, step)]
        dropped = len(lines) - len(kept)
        if dropped:
            write_text_atomic(self.path, "".join(line + "\n" for line in kept))
        return dropped


def _rows_up_to(lines: Iterable[str], step: int | None) -> list[dict[str, Any]]:
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn line from a killed writer
        if (
            isinstance(row, dict)
            and step is not None
            and isinstance(row.get("step"), int)
            and row["step"] <= step
        ):
            rows.append(row)
    return rows
