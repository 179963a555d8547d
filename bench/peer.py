"""Section 7 (only with `--sections peer`): this service against the TRL peer on the same work.

The peer (`../shared/peers/trl_grpo_bench.py`, TRL's `GRPOTrainer` in a virtual environment of
its own, never a dependency of this project) trains a randomly initialised GPT-2 (2 layers, 128
wide, 4 heads, character tokenizer) on 8 prompts x 8 completions of 64 tokens per step, beta
0.04, fp32: its best settings on a CPU. Equal work: every completion on both sides is decoded to
its full 64 tokens (EOS ignored: `bench/peer_fixed_length.py` gives the unchanged peer
script `min_new_tokens`; our trials `fixed_length`), and both sides start from a fresh policy.
Each round runs, each in a fresh process where it matters, so background load falls on all of
them alike:

1. the peer;
2. our built-in GPT in the fp32 reference configuration;
3. the same with the settings the service ships for this machine;
4. our transformers policy on the peer's model shape with the shipped defaults (precision,
   attention and decoding dtype as `auto` resolves them here; in-process scoring).

Every row reports completion tokens per second beside completions per second. Headlines
(medians over the rounds): `peer_completions_per_s`, `peer_tokens_per_s`, `grpo_tokens_per_s`
(2), `tokens_vs_peer` (2 over 1), `tokens_vs_peer_default` (3 over 1), `hf_tokens_vs_peer` and
`hf_vs_peer` (4 over 1).

    GRPO_PEER_PYTHON   the peer venv's python (default ~/trl-venv/bin/python)
    GRPO_PEER_DIR      the folder of trl_grpo_bench.py (default <repo>/../shared/peers)
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.grpo import GRPOPlan, Runner, reference_config, with_updates
from bench.grpo_rows import REFERENCE_ROW, reference_rows, shipped_rows, shipped_settings
from bench.hf import HFPlan, bench_rates
from bench.results import add_table, new_section, set_headline
from bench.timing import median

TITLE = "7. This service against the TRL peer"
HEADLINE = (
    "peer_completions_per_s",
    "hf_vs_peer",
    "peer_tokens_per_s",
    "grpo_tokens_per_s",
    "tokens_vs_peer",
    "tokens_vs_peer_default",
    "hf_tokens_vs_peer",
)
FIXED_LENGTH = Path(__file__).with_name("peer_fixed_length.py")
PEER_DIR = Path(os.environ.get("GRPO_PEER_DIR", Path(__file__).resolve().parents[2] / "shared" / "peers"))
PEER_PYTHON = Path(os.environ.get("GRPO_PEER_PYTHON", Path.home() / "trl-venv" / "bin" / "python"))
HF_ROW = "hf policy, shipped precision and attention (the benchmark process's threads and OpenMP settings)"
REFERENCE, SHIPPED = "built-in GPT, fp32 reference", "built-in GPT, shipped settings"
TARGETS = {REFERENCE: 2.5, SHIPPED: 3.0, HF_ROW: 2.0}  # tokens per second over the peer's


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
    args = [str(PEER_PYTHON), str(FIXED_LENGTH), str(PEER_DIR / "trl_grpo_bench.py")]
    args += ["--steps", str(plan.peer_steps + 2), "--max-completion-length", str(plan.ours.max_new_tokens)]
    args += ["--warmup", "2", "--threads", str(plan.threads)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the peer failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return json.loads(lines[-1])


def _builtin_trials(runner: Runner, base: dict[str, Any], device: str, threads: int) -> dict[str, dict]:
    """The reference and shipped rows, from a fresh policy, every completion to its full length.
    Where the shipped settings add nothing to the reference here, it is one trial (`SHIPPED` absent)."""
    later, _, default = shipped_rows(device, threads, unshipped=False)
    rows = {name: (updates, options) for name, updates, options in reference_rows() + later}
    pairs = ((REFERENCE, REFERENCE_ROW),) + (((SHIPPED, default),) if default != REFERENCE_ROW else ())
    return {
        name: runner.kwargs(with_updates(base, rows[row][0]), rows[row][1], warm=False, fixed_length=True)
        for name, row in pairs
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
    base = reference_config(0, plan.ours.max_new_tokens)
    peer: list[dict[str, Any]] = []
    ours: dict[str, list[dict[str, Any]]] = {}
    hf: list[float] = []
    runner = Runner(grpo, device, weights=None)
    trials = _builtin_trials(runner, base, device, grpo.threads)
    for _ in range(plan.rounds):
        peer.append(_peer_run(plan))
        for name, result in runner.run_round(trials).items():
            ours.setdefault(name, []).append(result)
        hf.append(median(bench_rates(plan.ours, policies=("hf",), fixed_length=True)["hf"]))
    merged = {k: Runner.merge(v) for k, v in ours.items()}
    if SHIPPED not in trials:
        merged[SHIPPED] = merged[REFERENCE]
        ship = shipped_settings(device)
        section["notes"].append(
            f"The shipped settings add nothing to the fp32 reference here ({ship['precision']}, no compile, "
            f"{ship['torch_threads']} torch threads, {ship['waits']} wait, decoding on every thread): one "
            "trial gives both rows."
        )
    return _fill(section, peer, merged, hf, plan.ours.max_new_tokens)


def _fill(
    section: dict[str, Any], peer: list[dict], ours: dict[str, dict], hf: list[float], hf_tokens: int
) -> dict[str, Any]:
    """The table and headlines; hf_tokens: the hf row's tokens per completion (it runs fixed-length)."""
    peer_rate = median([r["completions_per_s"] for r in peer])
    peer_len = median([r["mean_completion_len"] for r in peer])
    peer_tokens = median([r["completions_per_s"] * r["mean_completion_len"] for r in peer])
    rates = {**{k: r["completions_per_s"] for k, r in ours.items()}, HF_ROW: median(hf)}
    lengths = {**{k: r["completion_tokens"] for k, r in ours.items()}, HF_ROW: float(hf_tokens)}
    tokens = {**{k: r.get("tokens_per_s", r["completions_per_s"] * r["completion_tokens"]) for k, r in ours.items()},
              HF_ROW: median(hf) * hf_tokens}  # fmt: skip
    rows = [["TRL GRPOTrainer (peer), fp32", peer_rate, peer_tokens, peer_len, 1.0, None]]
    for name, rate in rates.items():
        ratio = tokens[name] / peer_tokens
        rows.append([name, rate, tokens[name], lengths[name], ratio, TARGETS[name]])
        verdict = "met" if ratio >= TARGETS[name] else "not met"
        section["notes"].append(
            f"{name}: {ratio:.2f}x the peer's tokens/s (target >= {TARGETS[name]:g}x: {verdict})."
        )
    add_table(
        section,
        f"Alternating, {len(peer)} round(s); medians; every completion decoded to full length on both sides",
        [
            "trainer",
            "completions/s",
            "completion tokens/s",
            "mean completion tokens",
            "tokens/s vs peer",
            "target vs peer",
        ],  # fmt: skip
        rows,
    )
    section["notes"].append(
        "Equal work: both sides sample from freshly initialised models and decode every completion to "
        "its full length (EOS ignored; the peer through min_new_tokens)."
    )
    section["data"] = {"peer": peer, "ours": ours, "hf": hf}
    set_headline(section, "peer_completions_per_s", peer_rate)
    set_headline(section, "peer_tokens_per_s", peer_tokens)
    set_headline(section, "grpo_tokens_per_s", tokens[REFERENCE])
    set_headline(section, "tokens_vs_peer", tokens[REFERENCE] / peer_tokens)
    set_headline(section, "tokens_vs_peer_default", tokens[SHIPPED] / peer_tokens)
    set_headline(section, "hf_tokens_vs_peer", tokens[HF_ROW] / peer_tokens)
    set_headline(section, "hf_vs_peer", rates[HF_ROW] / peer_rate)
    return section
