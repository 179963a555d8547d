"""The docs' benchmark tables, made from the machines' result files (`bench.result_file`).

A page marks each generated block with a pair of comments, and everything between them is
rewritten from the result files:

    <!-- bench:NAME -->
    ...generated...
    <!-- /bench:NAME -->

NAME is `machines` (each machine measured, its CPU, GPU and versions, and the runs), `headline`
(every headline key against its target, a column per machine), `readme` (the headline keys the
README shows) or `section:SECTION` (that section's tables and notes from each machine that has
it, SECTION being a section's `name` in bench.json). Every figure sits under its machine's name.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from bench.machine import machine_label
from bench.results import HEADLINE_TARGETS, fmt, section_body

MARKER = re.compile(r"(<!-- bench:(?P<name>[\w:-]+) -->\n)(?P<body>.*?)(<!-- /bench:(?P=name) -->)", re.S)
# The sections a page may ask for, by bench.json's section names.
SECTIONS = (
    "reward",
    "sampling",
    "train_step",
    "grpo_step",
    "ablation",
    "hf",
    "peer",
    "reward-cost",
    "sandbox",
    "cost-curve",
    "env",
    "fsdp",
    "async",
    "autoscale",
    "gpu_steps",
    "gpu_memory",
)
# The README's headline: the GRPO step against the peer, then what each other part costs.
README_KEYS = (
    "tokens_vs_peer",
    "tokens_vs_peer_default",
    "hf_tokens_vs_peer",
    "grpo_tokens_per_s",
    "peer_tokens_per_s",
    "step_roofline_fraction",
    "hf_vs_builtin",
    "kv_cache_speedup",
    "pool2_vs_inprocess_1ms",
    "auto_vs_best",
    "sandbox_execs_per_s",
    "cost_exponent_tokens",
    "env_wait_fraction",
    "bf16_vs_fp32_speedup",
    "mfu",
)
FIGURES_DIR = "figures"  # under docs/: each machine's figures in a folder named by its kind


class MarkerError(ValueError):
    """A page asks for a block that is not made here."""


def shown_command(command: str) -> str:
    """A run's command without its output directory, which says nothing about what was measured."""
    words, shown = shlex.split(command), []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--out":
            skip = True
        elif not word.startswith("--out="):
            shown.append(word)
    return shlex.join(shown)


def _run_line(run: dict[str, Any]) -> str:
    load = run.get("load_average_at_start")
    return (
        f"`{shown_command(run['command'])}` ({run['mode']} plan, {run['elapsed_s']:.0f} s"
        + (f", load average {load[0]} at the start" if load else "")
        + ")"
    )


def _machine_lines(result: dict[str, Any]) -> list[str]:
    machine = result["machine"]
    cpu, versions = machine["cpu"], machine["versions"]
    gpu = machine.get("gpu")
    gpu_text = (
        f"{gpu['name']} x{gpu['count']} ({gpu['memory_gib']} GiB, compute capability {gpu['capability']}, "
        f"CUDA {gpu['cuda']})"
        if gpu
        else "no GPU"
    )
    lines = [
        f"**{machine_label(machine)}** (`bench/results/{result['kind']}.json`): {cpu['vendor']} "
        f'"{cpu["model_name"]}", family {cpu["family"]} model {cpu["model"]}; flags '
        f"{', '.join(cpu['flags']) or 'none of note'} (torch's CPU capability: {cpu['torch_capability']}); "
        f"{machine['usable_cores']} usable of {machine['logical_cores']} logical cores, "
        f"{machine['memory_gib']} GiB; {gpu_text}; Python {versions['python']}, torch {versions['torch']}, "
        f"Ray {versions['ray']}, transformers {versions['transformers']}. Runs:",
        "",
    ]
    lines += [f"{i + 1}. {_run_line(run)}" for i, run in enumerate(result["runs"])]
    return [*lines, ""]


def machines_block(results: list[dict[str, Any]]) -> list[str]:
    if not results:
        return ["*No machine measured yet.*", ""]
    return [line for result in results for line in _machine_lines(result)]


def _cell(result: dict[str, Any], key: str) -> str:
    value = result["headline"].get(key)
    if value is not None:
        return fmt(value)
    note = result["headline_notes"].get(key, "")
    return f"n/a ({note})" if note else "n/a"


def headline_block(results: list[dict[str, Any]], keys: tuple[str, ...]) -> list[str]:
    """A row per key, a column per machine (named by its hardware), then the target."""
    header = ["headline", *(machine_label(r["machine"]) for r in results), "target"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for key in keys:
        cells = [f"`{key}`", *(_cell(r, key) for r in results), HEADLINE_TARGETS[key]]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _section_lines(result: dict[str, Any], section: dict[str, Any]) -> list[str]:
    run = result["runs"][section["run"]]
    elapsed = f", {section['elapsed_s']:.0f} s" if "elapsed_s" in section else ""
    lines = [
        f"*{machine_label(result['machine'])}*: `{shown_command(run['command'])}` ({run['mode']} plan{elapsed})",
        "",
    ]
    return lines + section_body(section, f"{FIGURES_DIR}/{result['kind']}/")


def section_block(results: list[dict[str, Any]], name: str) -> list[str]:
    lines = [
        line
        for result in results
        for section in result["sections"]
        if section["name"] == name
        for line in _section_lines(result, section)
    ]
    return lines or ["*Not measured on any machine with a result file.*", ""]


def blocks(results: list[dict[str, Any]]) -> dict[str, str]:
    """Every block a page may ask for, by marker name."""
    made = {
        "machines": machines_block(results),
        "headline": headline_block(results, tuple(HEADLINE_TARGETS)),
        "readme": headline_block(results, README_KEYS),
        **{f"section:{name}": section_block(results, name) for name in SECTIONS},
    }
    return {name: "\n".join(lines) for name, lines in made.items()}


def fill(text: str, made: dict[str, str]) -> str:
    """`text` with every marked block rewritten; an unknown block name is refused."""

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in made:
            raise MarkerError(f"unknown benchmark block {name!r}; known: {sorted(made)}")
        return match.group(1) + made[name] + match.group(4)

    return MARKER.sub(replace, text)
