"""A machine's result file: what was measured on one kind of machine, assembled from runs' bench.json.

`bench/results/<kind>.json` (the kind from `bench.machine.machine_kind`) has bench.json's shape,
with `runs` added: every section names the run that measured it (`run`, an index into `runs`,
each with its command, plan and load). Adding a run replaces each section it measured, by title,
except that a section that failed or was skipped never replaces one that measured; runs that no
section names any more are dropped, and the headline is gathered again from the sections kept.
So a machine's file can be built from several runs split by `--sections`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bench.results import NOT_MEASURED, collect_headline, finite

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCHEMA_VERSION = 1
# What belongs to a run rather than to the machine: the command, the plan, when, under what load and
# settings, with which versions (the machine object keeps the newest run's versions too).
RUN_KEYS = ("command", "mode", "started_at", "elapsed_s", "load_average_at_end")
MACHINE_RUN_KEYS = ("versions", "thread_env", "load_average_at_start", "torch_default_threads")


ON_NO_RUN = "not measured on this machine"  # a key none of the file's sections set


class ResultFileError(ValueError):
    """A run that cannot go into a result file (no machine kind, or another machine's file)."""


def _run(result: dict[str, Any]) -> dict[str, Any]:
    machine = result["machine"]
    return {
        **{key: result.get(key) for key in RUN_KEYS},
        **{key: machine.get(key) for key in MACHINE_RUN_KEYS},
    }


def _order(section: dict[str, Any]) -> tuple[int, str]:
    """Sections in the benchmark's order: by the number their title starts with, unnumbered last."""
    number = re.match(r"(\d+)\.", section["title"])
    return (int(number.group(1)) if number else 1000, section["title"])


def kind_of(result: dict[str, Any]) -> str:
    kind = (result.get("machine") or {}).get("kind")
    if not kind:
        raise ResultFileError(
            "this bench.json's machine has no `kind` (written before machines were named): "
            "measure again with `python -m bench`"
        )
    return kind


def merge_run(existing: dict[str, Any] | None, result: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The result file with `result` (one run's bench.json object) added, and a line per section on
    what became of it."""
    kind = kind_of(result)
    if existing is not None and existing["kind"] != kind:
        raise ResultFileError(f"a run on {kind!r} cannot go into the result file of {existing['kind']!r}")
    runs = list(existing["runs"]) if existing else []
    sections = {s["title"]: s for s in existing["sections"]} if existing else {}
    runs.append(_run(result))
    added = len(runs) - 1
    report = []
    for section in result["sections"]:
        old = sections.get(section["title"])
        if section["status"] != "ok" and old is not None and old["status"] == "ok":
            report.append(f"kept {section['title']!r} of an earlier run (this run's is {section['status']})")
            continue
        sections[section["title"]] = {**section, "run": added}
        report.append(f"{'replaced' if old else 'added'} {section['title']!r} ({section['status']})")
    machine = {k: v for k, v in result["machine"].items() if k not in ("thread_env", "load_average_at_start")}
    return assemble(kind, machine, runs, sorted(sections.values(), key=_order)), report


def assemble(
    kind: str, machine: dict[str, Any], runs: list[dict[str, Any]], sections: list[dict[str, Any]]
) -> dict[str, Any]:
    """The result file's object: only the runs its sections name (renumbered), the headline gathered."""
    used = sorted({s["run"] for s in sections})
    index = {old: new for new, old in enumerate(used)}
    sections = [{**s, "run": index[s["run"]]} for s in sections]
    headline, notes = collect_headline(sections)
    notes = {key: ON_NO_RUN if note == NOT_MEASURED else note for key, note in notes.items()}
    return {
        "schema": SCHEMA_VERSION,
        "kind": kind,
        "machine": machine,
        "runs": [runs[i] for i in used],
        "headline": headline,
        "headline_notes": notes,
        "sections": sections,
    }


def read_run(path: Path) -> dict[str, Any]:
    """A run's bench.json, from the file or the directory `python -m bench --out` wrote."""
    path = path / "bench.json" if path.is_dir() else path
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ResultFileError(f"cannot read a bench.json at {path}: {exc}") from exc


def result_path(kind: str, results_dir: Path = RESULTS_DIR) -> Path:
    return results_dir / f"{kind}.json"


def load_results(results_dir: Path = RESULTS_DIR) -> list[dict[str, Any]]:
    """Every machine's result file, by kind."""
    return [json.loads(path.read_text()) for path in sorted(results_dir.glob("*.json"))]


def add_run(run_path: Path, results_dir: Path = RESULTS_DIR) -> tuple[Path, list[str]]:
    """Merge one run into its machine's result file (made if there is none); returns the file and the report."""
    result = read_run(run_path)
    path = result_path(kind_of(result), results_dir)
    existing = json.loads(path.read_text()) if path.exists() else None
    merged, report = merge_run(existing, result)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(finite(merged), indent=1, allow_nan=False) + "\n")
    return path, report
