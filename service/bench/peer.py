"""Section 7 (only with `--sections peer`): this service against the TRL peer on the same work.

The peer (`../shared/peers/trl_grpo_bench.py`, TRL's `GRPOTrainer` in a virtual environment of
its own, never a dependency of this project) trains a randomly initialised GPT-2 (2 layers, 128
wide, 4 heads, character tokenizer) on 8 prompts x 8 completions of at most 64 tokens per step,
beta 0.04, fp32: its best settings on a CPU. Each round runs, each in a fresh process where it
matters, so background load falls on all of them alike:

1. the peer;
2. our built-in GPT in the fp32 reference configuration (the `grpo_completions_per_s` headline's
   trial: SFT-warm policy, streamed pool scoring);
3. the same with the settings the service ships for this machine (`grpo_completions_per_s_default`);
4. our transformers policy on the peer's model shape with the shipped defaults (in-process scoring).

Headlines: `peer_completions_per_s` (median over the rounds' runs) and `hf_vs_peer` (4 over 1).

    GRPO_PEER_PYTHON   the peer venv's python (default ~/trl-venv/bin/python)
    GRPO_PEER_DIR      the folder of trl_grpo_bench.py (default <repo>/../shared/peers)
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from service.bench.grpo import GRPOPlan, Runner, reference_config, with_updates
from service.bench.grpo_rows import REFERENCE_ROW, reference_rows, shipped_rows
from service.bench.hf import HFPlan, bench_rates
from service.bench.isolated import run_isolated
from service.bench.results import add_table, new_section, set_headline
from service.bench.timing import median

TITLE = "7. This service against the TRL peer"
HEADLINE = ("peer_completions_per_s", "hf_vs_peer")
PEER_DIR = Path(os.environ.get("GRPO_PEER_DIR", Path(__file__).resolve().parents[3] / "shared" / "peers"))
PEER_PYTHON = Path(os.environ.get("GRPO_PEER_PYTHON", Path.home() / "trl-venv" / "bin" / "python"))
HF_ROW = "hf policy, fp32 (the benchmark process's threads and OpenMP settings)"
TARGETS = {
    "built-in GPT, fp32 reference": 2.5,
    "built-in GPT, shipped settings": 4.0,
    HF_ROW: 2.0,
}


@dataclass(frozen=True)
class PeerPlan:
    rounds: int = 2
    peer_steps: int = 6  # timed steps of one peer run (after its own 2 warm-up steps)
    threads: int = 2
    ours: HFPlan = field(
        default_factory=lambda: HFPlan(steps=4, warmup=1, prompts=8, group_size=8, max_new_tokens=64)
    )


def _peer_run(plan: PeerPlan) -> dict[str, Any]:
    """One peer run; its last stdout line is a JSON object (completions_per_s, sec_per_step, ...)."""
    args = [str(PEER_PYTHON), str(PEER_DIR / "trl_grpo_bench.py"), "--steps", str(plan.peer_steps + 2)]
    args += ["--warmup", "2", "--threads", str(plan.threads)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the peer failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return json.loads(lines[-1])


def _builtin_trials(runner: Runner, base: dict[str, Any], device: str, threads: int) -> dict[str, dict]:
    later, _, default = shipped_rows(device, threads, unshipped=False)
    rows = {name: (updates, options) for name, updates, options in reference_rows() + later}
    return {
        "built-in GPT, fp32 reference": runner.kwargs(
            with_updates(base, rows[REFERENCE_ROW][0]), rows[REFERENCE_ROW][1]
        ),
        "built-in GPT, shipped settings": runner.kwargs(
            with_updates(base, rows[default][0]), rows[default][1]
        ),
    }


def bench_peer(plan: PeerPlan, grpo: GRPOPlan) -> dict[str, Any]:
    """The peer and ours, alternating (the built-in trials need `ray.init` done by the caller)."""
    section = new_section("peer", TITLE, owns=HEADLINE)
    if not (PEER_PYTHON.is_file() and (PEER_DIR / "trl_grpo_bench.py").is_file()):
        reason = f"the peer is not installed ({PEER_PYTHON}, {PEER_DIR})"
        for key in HEADLINE:
            set_headline(section, key, None, reason)
        section["status"], section["error"] = "skipped", reason
        return section
    device = "cuda" if torch.cuda.is_available() else "cpu"
    base = reference_config(grpo.sft_steps, grpo.max_new_tokens)
    peer: list[dict[str, Any]] = []
    ours: dict[str, list[dict[str, Any]]] = {}
    hf: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        weights = str(Path(tmp) / "sft.pt")
        run_isolated(
            "service.bench.grpo_trial:sft_warm_start",
            {"trainer_cfg": base, "out_path": weights, "threads": grpo.threads, "device": device},
        )
        runner = Runner(grpo, device, weights)
        trials = _builtin_trials(runner, base, device, grpo.threads)
        for _ in range(plan.rounds):
            peer.append(_peer_run(plan))
            for name, result in runner.run_round(trials).items():
                ours.setdefault(name, []).append(result)
            hf.append(median(bench_rates(plan.ours, policies=("hf",))["hf"]))
    return _fill(section, peer, {k: Runner.merge(v) for k, v in ours.items()}, hf)


def _fill(
    section: dict[str, Any], peer: list[dict], ours: dict[str, dict], hf: list[float]
) -> dict[str, Any]:
    peer_rate = median([r["completions_per_s"] for r in peer])
    rates = {
        **{k: r["completions_per_s"] for k, r in ours.items()},
        HF_ROW: median(hf),
    }
    tokens = {k: r["completion_tokens"] for k, r in ours.items()}
    rows = [
        [
            "TRL GRPOTrainer (peer), fp32",
            peer_rate,
            1.0,
            median([r["mean_completion_len"] for r in peer]),
            None,
        ]
    ]
    for name, rate in rates.items():
        ratio = rate / peer_rate
        rows.append([name, rate, ratio, tokens.get(name), TARGETS[name]])
        verdict = "met" if ratio >= TARGETS[name] else "not met"
        section["notes"].append(f"{name}: {ratio:.2f}x the peer (target >= {TARGETS[name]:g}x: {verdict}).")
    add_table(
        section,
        f"Alternating, {len(peer)} round(s); medians",
        ["trainer", "completions/s", "vs peer", "mean completion tokens", "target vs peer"],
        rows,
    )
    section["notes"].append(
        "The peer and the hf policy sample from freshly initialised models (shorter completions); the "
        "built-in rows from the SFT-warm policy, as the GRPO headlines do."
    )
    section["data"] = {"peer": peer, "ours": ours, "hf": hf}
    set_headline(section, "peer_completions_per_s", peer_rate)
    set_headline(section, "hf_vs_peer", rates[HF_ROW] / peer_rate)
    return section
