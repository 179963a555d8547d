"""Sections of the benchmark, and the two files they end up in: bench.json and bench.md.

A section is a plain dict (JSON as it stands):

    {"name", "title", "status": "ok" | "error" | "skipped", "error": str | None,
     "data": {...raw figures...}, "tables": [{"title", "columns", "rows"}], "notes": [str],
     "headline": {key: number | None}, "headline_notes": {key: reason}, "owns": [headline keys]}
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.machine import describe

NOT_MEASURED = "not measured in this run"  # the note of a key no section of the run set

# Headline keys, in the order they are shown, with the target each is read against.
HEADLINE_TARGETS: dict[str, str] = {
    "kv_cache_speedup": ">= 5x tokens/s (tiny and small, 64 new tokens)",
    "pool2_vs_inprocess": ">= 1.6x in-process score_batch (4,096 completions)",
    "reward_wait_fraction": "<= 0.05 of the GRPO step (streamed scoring)",
    "grpo_completions_per_s": ">= 2.5x peer_completions_per_s (fp32 reference configuration)",
    "grpo_completions_per_s_default": ">= 4x peer_completions_per_s (the shipped settings)",
    "step_roofline_fraction": ">= 0.6 (reference step GFLOP/s over this CPU's matmul rate)",
    "peer_completions_per_s": "TRL GRPOTrainer, fp32, same work (--sections peer)",
    "bf16_vs_fp32_speedup": "GPU only (124M model)",
    "mfu": "GPU only (124M model, bf16)",
    "hf_completions_per_s": "the transformers policy's GRPO step (tiny GPT-2, the shipped precision)",
    "hf_vs_builtin": ">= 0.7 (hf over the built-in GPT at equal shapes, work and settings)",
    "hf_vs_peer": ">= 2x the TRL peer on its own model and work (`--sections peer`)",
    "pool2_vs_inprocess_1ms": ">= 1.8x in process (CPU-bound 1 ms reward, 1,024 items, 2 workers)",
    "reward_wait_fraction_io20ms": "<= 0.05 of the GRPO step (async 20 ms reward on the pool)",
    "inline_reward_fraction_io20ms": ">= 0.5 of the GRPO step (the same reward scored in process)",
    "auto_vs_best": "<= 1.05 (pool.placement auto over the faster of inline and pool, FEN reward)",
    "sandbox_execs_per_s": ">= 200 isolated executions/s of a trivial program (warm sandbox, one thread)",
    "sandbox_vs_bwrap_per_exec": ">= 5x one bubblewrap sandbox per execution",
    "sandbox_vs_plain": ">= 1x `subprocess.run` of a fresh interpreter with no isolation",
    "peer_tokens_per_s": "TRL GRPOTrainer's completion tokens/s, every completion full length (--sections peer)",
    "grpo_tokens_per_s": "the fp32 reference's completion tokens/s at the peer's work, fresh policy",
    "tokens_vs_peer": ">= 2.5x peer_tokens_per_s (fp32 reference, same run, equal tokens)",
    "tokens_vs_peer_default": ">= 3x peer_tokens_per_s (the shipped settings)",
    "hf_tokens_vs_peer": ">= 2x peer_tokens_per_s (the transformers policy)",
    "env_wait_fraction": "the share of a GRPO step of episodes spent waiting on the environments (guess with a "
    "20 ms tool call per step, 16 at once, a pool of 2; --sections env; measured, no target)",
    "cost_exponent_tokens": "<= 1.1 (seconds per step against completion tokens per step, K and prompts sweeps)",
}


def new_section(name: str, title: str, owns: tuple[str, ...] = ()) -> dict[str, Any]:
    """An empty section; `owns` lists the headline keys it sets (null with its error if it fails)."""
    return {
        "name": name,
        "title": title,
        "owns": list(owns),
        "status": "ok",
        "error": None,
        "data": {},
        "tables": [],
        "notes": [],
        "headline": {},
        "headline_notes": {},
    }


def add_table(section: dict[str, Any], title: str, columns: list[str], rows: list[list[Any]]) -> None:
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"table {title!r}: row {row!r} has {len(row)} cells for {len(columns)} columns")
    section["tables"].append({"title": title, "columns": list(columns), "rows": [list(r) for r in rows]})


def set_headline(section: dict[str, Any], key: str, value: float | None, reason: str | None = None) -> None:
    """A headline figure; None needs the reason it could not be measured."""
    if key not in HEADLINE_TARGETS:
        raise ValueError(f"unknown headline key {key!r}; allowed: {sorted(HEADLINE_TARGETS)}")
    if value is None:
        if not reason:
            raise ValueError(f"headline {key!r} is null and needs a reason")
        section["headline_notes"][key] = reason
    elif not math.isfinite(float(value)):
        section["headline_notes"][key] = reason or f"not finite ({value})"
        value = None
    section["headline"][key] = None if value is None else float(value)


def collect_headline(sections: list[dict[str, Any]]) -> tuple[dict[str, float | None], dict[str, str]]:
    """Every headline key from the sections that set it; the others null, with the reason."""
    headline: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for section in sections:
        headline.update(section["headline"])
        notes.update(section["headline_notes"])
        if section["status"] != "ok":
            for key in section.get("owns", []):
                if headline.get(key) is None:
                    notes.setdefault(
                        key, f"section {section['title']!r} {section['status']}: {section['error']}"
                    )
    for key in HEADLINE_TARGETS:
        if key not in headline:
            headline[key] = None
            notes.setdefault(key, NOT_MEASURED)
    return {k: headline[k] for k in HEADLINE_TARGETS}, {k: notes[k] for k in HEADLINE_TARGETS if k in notes}


def fmt(value: Any) -> str:
    """A table cell: numbers to a readable precision, None as 'n/a'."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.1 or magnitude == 0:
        return f"{value:.2f}"
    return f"{value:.3g}"


def markdown_table(table: dict[str, Any]) -> list[str]:
    lines = [f"**{table['title']}**", "", "| " + " | ".join(table["columns"]) + " |"]
    lines.append("|" + "|".join("---" for _ in table["columns"]) + "|")
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in table["rows"]]
    return [*lines, ""]


def headline_lines(headline: dict[str, float | None], notes: dict[str, str]) -> list[str]:
    lines = ["| headline | measured | target | note |", "|---|---|---|---|"]
    for key, target in HEADLINE_TARGETS.items():
        lines.append(f"| `{key}` | {fmt(headline.get(key))} | {target} | {notes.get(key, '')} |")
    return [*lines, ""]


def render_markdown(result: dict[str, Any]) -> str:
    """The readable report: machine, headline against targets, then each section's tables."""
    machine = result["machine"]
    lines = [
        "# Benchmark",
        "",
        f"Command: `{result['command']}` ({result['mode']}; {result['elapsed_s']:.0f} s).",
        "",
        f"Machine: {describe(machine)}. Load average at start {machine.get('load_average_at_start')}, "
        f"at end {result.get('load_average_at_end')}.",
        "",
        "Every figure is the median of the timed repeats after a warm-up; ratios compare figures "
        "taken in this run.",
        "",
        "## Headline",
        "",
        *headline_lines(result["headline"], result["headline_notes"]),
    ]
    for section in result["sections"]:
        lines += [f"## {section['title']}", ""]
        if "elapsed_s" in section:
            lines += [
                f"*{section['elapsed_s']:.0f} s; load average after: {section.get('load_average_at_end')}*",
                "",
            ]
        lines += section_body(section)
    return "\n".join(lines).rstrip() + "\n"


def section_body(section: dict[str, Any], figures_dir: str = "") -> list[str]:
    """A section's status when it did not measure, its tables, its figures (files under
    `figures_dir`) and its notes, as Markdown lines."""
    lines = [f"*{section['status']}*: {section['error']}", ""] if section["status"] != "ok" else []
    for table in section["tables"]:
        lines += markdown_table(table)
    for figure in section.get("figures", []):
        lines += [f"![{figure['title']}]({figures_dir}{figure['file']})", ""]
    lines += [f"- {note}" for note in section["notes"]]
    return [*lines, ""] if section["notes"] else lines


def finite(obj: Any) -> Any:
    """JSON has no NaN or infinity: such numbers become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def write_results(result: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """Write DIR/bench.json and DIR/bench.md; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "bench.json", out / "bench.md"
    json_path.write_text(json.dumps(finite(result), indent=1, allow_nan=False) + "\n")
    md_path.write_text(render_markdown(result))
    if any(section.get("figures") for section in result["sections"]):
        from bench.plots import write_figures  # matplotlib only when a section has a figure

        write_figures(result, out)
    return json_path, md_path
