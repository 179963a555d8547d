"""Section 6 (`--sections peer`): the TRL peer on the same work, alternating with ours.

The peer (`../shared/peers/trl_grpo_bench.py`: TRL's `GRPOTrainer`, fp32, a 2-layer 128-wide GPT-2
over a character vocabulary, 8 prompts x K = 8 of at most 64 tokens, beta 0.04) runs in its own
virtual environment and process; it is never a dependency of this project. Each round runs the
peer, then our fp32 reference configuration, then our shipped settings (each in a fresh process),
so background load falls on all three alike; figures are medians over the rounds' steps.

    GRPO_PEER_PYTHON   the peer venv's python (default ~/trl-venv/bin/python)
    GRPO_PEER_SCRIPT   the peer script (default <repo>/../shared/peers/trl_grpo_bench.py)
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch

from service.bench.grpo import GRPOPlan, Runner, reference_config, with_updates
from service.bench.grpo_rows import REFERENCE_ROW, reference_rows, shipped_rows
from service.bench.isolated import run_isolated
from service.bench.results import add_table, new_section, set_headline
from service.bench.timing import median

REPO = Path(__file__).resolve().parents[2]
TARGETS = {"ours, fp32 reference": 2.5, "ours, shipped settings": 4.0}


@dataclass(frozen=True)
class PeerPlan:
    steps: int = 12  # the peer's timed steps per round (after its own 2 warm-up steps)
    rounds: int = 2
    threads: int = 2
    timeout_s: float = 900.0


def find_peer() -> tuple[Path, Path] | str:
    """(python, script) of the installed peer, or why it cannot run."""
    python = Path(os.environ.get("GRPO_PEER_PYTHON", Path.home() / "trl-venv" / "bin" / "python"))
    script = Path(os.environ.get("GRPO_PEER_SCRIPT", REPO.parent / "shared" / "peers" / "trl_grpo_bench.py"))
    if not script.is_file():
        return f"no peer script at {script} (set GRPO_PEER_SCRIPT)"
    if not python.is_file():
        return f"no peer python at {python} (install the peer's venv as its README says, or set GRPO_PEER_PYTHON)"
    return python, script


def run_peer(python: Path, script: Path, plan: PeerPlan) -> dict[str, Any]:
    """One peer run; its last stdout line is a JSON object (completions_per_s, sec_per_step, ...)."""
    args = [str(python), str(script), "--steps", str(plan.steps + 2), "--threads", str(plan.threads)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=plan.timeout_s, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"the peer failed (exit {proc.returncode}): {tail}")
    return json.loads(lines[-1])


def _our_trials(runner: Runner, base: dict[str, Any], device: str, threads: int) -> dict[str, dict[str, Any]]:
    later, _, default = shipped_rows(device, threads)
    rows = {name: (updates, options) for name, updates, options in reference_rows() + later}
    return {
        "ours, fp32 reference": runner.kwargs(with_updates(base, rows[REFERENCE_ROW][0]), rows[REFERENCE_ROW][1]),
        "ours, shipped settings": runner.kwargs(with_updates(base, rows[default][0]), rows[default][1]),
    }


def bench_peer(plan: PeerPlan, grpo: GRPOPlan) -> dict[str, Any]:
    """The peer and ours, alternating (needs `ray.init` done by the caller)."""
    section = new_section("peer", "6. The TRL peer on the same work", owns=("peer_completions_per_s",))
    found = find_peer()
    if isinstance(found, str):
        section["status"], section["error"] = "skipped", found
        set_headline(section, "peer_completions_per_s", None, found)
        return section
    device = "cuda" if torch.cuda.is_available() else "cpu"
    base = reference_config(grpo.sft_steps, grpo.max_new_tokens)
    peer_runs: list[dict[str, Any]] = []
    ours: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        weights = str(Path(tmp) / "sft.pt")
        run_isolated(
            "service.bench.grpo_trial:sft_warm_start",
            {"trainer_cfg": base, "out_path": weights, "threads": grpo.threads, "device": device},
        )
        runner = Runner(grpo, device, weights, gcs=ray.get_runtime_context().gcs_address)
        trials = _our_trials(runner, base, device, grpo.threads)
        for _ in range(plan.rounds):
            peer_runs.append(run_peer(*found, plan))
            for name, result in runner.run_round(trials).items():
                ours.setdefault(name, []).append(result)
    return _peer_section(section, peer_runs, {k: runner.merge(v) for k, v in ours.items()})


def _peer_section(section: dict[str, Any], peer_runs: list[dict], ours: dict[str, dict]) -> dict[str, Any]:
    peer_rate = median([r["completions_per_s"] for r in peer_runs])
    peer_step = median([r["sec_per_step"] for r in peer_runs])
    peer_len = median([r.get("mean_completion_len", float("nan")) for r in peer_runs])
    rows = [["TRL GRPOTrainer (peer), fp32", peer_step * 1e3, peer_rate, 1.0, peer_len, None]]
    for name, r in ours.items():
        ratio = r["completions_per_s"] / peer_rate
        rows.append([name, r["step_s"] * 1e3, r["completions_per_s"], ratio, r["completion_tokens"], TARGETS[name]])
        verdict = "met" if ratio >= TARGETS[name] else "not met"
        section["notes"].append(f"{name}: {ratio:.2f}x the peer (target >= {TARGETS[name]:g}x: {verdict}).")
    add_table(
        section,
        f"Alternating, {len(peer_runs)} round(s); medians",
        ["trainer", "step ms", "completions/s", "vs peer", "mean completion tokens", "target vs peer"],
        rows,
    )
    section["notes"].append(
        "The peer samples from a freshly initialised policy (shorter completions); ours from the SFT-warm "
        "policy, as the headline does. Completions per second count whole completions either way."
    )
    section["data"] = {"peer_runs": peer_runs, "ours": ours}
    set_headline(section, "peer_completions_per_s", peer_rate)
    return section
