"""Section 7 (only with `--sections peer`): this service against the TRL peer, on the peer's own work.

The peer (`../shared/peers/trl_grpo_bench.py`, TRL's GRPOTrainer in a virtual environment of its
own) trains a randomly initialised GPT-2 (2 layers, 128 wide, 4 heads, character tokenizer) on 8
prompts x 8 completions of at most 64 tokens per step, beta 0.04, fp32: its best settings on a CPU.
The service trains the same model shape through its transformers policy with its shipped defaults
(fp32 on CPU, the KV cache, in-process scoring here). Runs alternate, peer then service, and the
headline is the ratio of the medians:

    hf_vs_peer   the service's completions/s over the peer's (the issue's target: >= 2)
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.bench.hf import HFPlan, bench_rates
from service.bench.results import add_table, new_section, set_headline
from service.bench.timing import median

TITLE = "7. This service against the TRL peer"
HEADLINE = ("hf_vs_peer",)
PEER_DIR = Path(os.environ.get("GRPO_PEER_DIR", Path(__file__).resolve().parents[3] / "shared" / "peers"))
PEER_PYTHON = Path(os.environ.get("GRPO_PEER_PYTHON", Path.home() / "trl-venv" / "bin" / "python"))


@dataclass(frozen=True)
class PeerPlan:
    rounds: int = 2
    peer_steps: int = 6  # timed steps of one peer run (after its own 2 warm-up steps)
    ours: HFPlan = HFPlan(steps=4, warmup=1, prompts=8, group_size=8, max_new_tokens=64)


def _peer_rate(plan: PeerPlan) -> float:
    script = PEER_DIR / "trl_grpo_bench.py"
    out = subprocess.run(
        [str(PEER_PYTHON), str(script), "--steps", str(plan.peer_steps + 2), "--warmup", "2"],
        capture_output=True, text=True, timeout=900, check=True,
    )  # fmt: skip
    return float(json.loads(out.stdout.strip().splitlines()[-1])["completions_per_s"])


def bench_peer(plan: PeerPlan) -> dict[str, Any]:
    section = new_section("peer", TITLE, owns=HEADLINE)
    if not (PEER_PYTHON.is_file() and (PEER_DIR / "trl_grpo_bench.py").is_file()):
        set_headline(section, "hf_vs_peer", None, f"the peer is not installed ({PEER_PYTHON}, {PEER_DIR})")
        section["status"] = "skipped"
        return section
    peer, ours = [], []
    for _ in range(plan.rounds):
        peer.append(_peer_rate(plan))
        ours.append(median(bench_rates(plan.ours, policies=("hf",))["hf"]))
    add_table(
        section, "completions/s, one row per round (peer run, then the service's steps)",
        ["round", "peer (TRL, fp32)", "service (hf policy)"],
        [[i + 1, p, o] for i, (p, o) in enumerate(zip(peer, ours, strict=True))],
    )  # fmt: skip
    set_headline(section, "hf_vs_peer", median(ours) / median(peer))
    section["data"] = {"peer": peer, "ours": ours}
    return section
