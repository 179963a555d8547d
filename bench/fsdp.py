"""Section `fsdp` (`--sections fsdp`): a GRPO step under ddp and under fsdp, two gloo ranks on a CPU.

Each strategy runs in two fresh processes of its own (a gloo group; `torch.multiprocessing`), so
that each rank's peak memory is its own: the peak resident set above the RSS before the trainer
is built (on a GPU the allocator's peak). On a CPU, glibc serves every block of 64 KiB or more by
a mapping of its own and unmaps it when it is freed (not the trainer's `trainer.host_memory`
setting, which keeps freed memory for the next step), so the resident set follows the live tensors
rather than what a fragmented heap keeps. The run's shape is the `smoke` preset with a larger
built-in GPT: one SFT step, then `warmup` + `steps` GRPO steps with the FEN reward in process;
the median GRPO step time is each rank's. Beside each rank's measured peak: what it holds of the
policy's training state (`trainer.strategy.footprint`: parameters, gradients, AdamW's moments) and
the memory plan's estimate of its peak (`service.memory_plan`, less the process's own term, which
the measured delta leaves out too); on a CPU also the whole process's peak against the plan's
estimate with that term. On a machine with CUDA devices the group runs NCCL, one device per rank.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench.isolated import PeakMemory, peak_rss_mb
from bench.results import add_table, new_section
from bench.timing import median

TITLE = "12. FSDP against DDP: step time and memory per rank"
HEADLINE: tuple[str, ...] = ()
STRATEGIES = ("ddp", "fsdp")


@dataclass(frozen=True)
class FSDPPlan:
    n_layer: int = 6
    n_embd: int = 512
    n_head: int = 8
    prompts_per_rank: int = 2
    group_size: int = 4
    max_new_tokens: int = 32
    steps: int = 3
    warmup: int = 1
    world: int = 2


def _overrides(plan: FSDPPlan, strategy: str, world: int) -> list[str]:
    return [
        "model.size=custom", f"model.n_layer={plan.n_layer}", f"model.n_embd={plan.n_embd}",
        f"model.n_head={plan.n_head}", f"scaling.num_workers={world}", f"scaling.strategy={strategy}",
        "precision.dtype=fp32", f"sampling.group_size={plan.group_size}",
        f"sampling.max_new_tokens={plan.max_new_tokens}", f"sampling.prompts_per_microbatch={plan.prompts_per_rank}",
        f"grpo.prompts_per_step={plan.prompts_per_rank * world}", "sft.steps=1", f"sft.batch_size={4 * world}",
        f"grpo.steps={plan.warmup + plan.steps}",
    ]  # fmt: skip


def _rank(rank: int, world: int, rendezvous: str, plan: FSDPPlan, strategy: str, out: str) -> None:
    from rewards import score_totals
    from service.config import load_config, trainer_config
    from service.scaling_strategy import strategy_config
    from trainer import engine
    from trainer.data.chess_games import CHESS_ALPHABET, generate_pairs
    from trainer.distributed import gather_json
    from trainer.engine import Trainer
    from trainer.grpo.reward_source import InlineRewards
    from trainer.policy.char_tokenizer import CharTokenizer
    from trainer.strategy.footprint import rank_state_bytes

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)
        _live_memory_heap()
        engine.configure_host_memory = lambda device: False  # keep the setting above
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dist.init_process_group(
        "nccl" if cuda else "gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world,
        timeout=timedelta(seconds=600),
    )  # fmt: skip
    try:
        cfg = load_config("smoke", overrides=_overrides(plan, strategy, world))
        pairs = generate_pairs(64, seed=cfg.data.seed, min_plies=1, max_plies=4)
        memory = PeakMemory(device)
        trainer = Trainer(
            trainer_config(cfg), CharTokenizer(CHESS_ALPHABET), device, strategy=strategy_config(cfg)
        )
        trainer.sft_step(pairs[: cfg.sft.batch_size])
        rewards = InlineRewards(score_totals)
        n = cfg.grpo.prompts_per_step
        times = []
        for step in range(cfg.grpo.steps):
            began = time.perf_counter()
            trainer.grpo_step(pairs[16 + step * n : 16 + (step + 1) * n], rewards)
            if step >= plan.warmup:
                times.append(time.perf_counter() - began)
        footprint = rank_state_bytes(trainer.model, [o.optimizer for o in trainer.optimizers.values()])
        mine = {"step_s": median(times), **memory.result(), "state_mb": footprint["total"] / 2**20}
        if not cuda:  # the whole process: what the plan's estimate with its process term is to bound
            mine["process_peak_mb"] = round(peak_rss_mb(), 1)
        everyone = gather_json(mine, device)
        if rank == 0:
            torch.save({"ranks": everyone, "params": sum(p.numel() for p in trainer.model.parameters())}, out)
    finally:
        dist.destroy_process_group()
    # The figures are out: leave without the interpreter's teardown, in which a thread the group
    # left behind can abort the process ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _live_memory_heap() -> None:
    """glibc: blocks of 64 KiB or more mapped one by one and unmapped when freed (a fixed threshold,
    which also stops glibc from raising it as blocks are freed)."""
    from trainer.host_memory import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, _glibc

    libc = _glibc()
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, 64 << 10)
        libc.mallopt(M_TRIM_THRESHOLD, 128 << 10)


def _estimate_mb(plan: FSDPPlan, strategy: str, world: int, prompt_tokens: int) -> tuple[float, float]:
    """The memory plan's peak for one rank: less the process's own term, and whole (MiB)."""
    from service.config import load_config
    from service.memory_plan import PROCESS_BYTES, estimate
    from service.model_shape import model_shape
    from trainer.data.chess_games import CHESS_ALPHABET
    from trainer.policy.char_tokenizer import CharTokenizer

    cfg = load_config("smoke", overrides=_overrides(plan, strategy, world))
    shape = model_shape(cfg, CharTokenizer(CHESS_ALPHABET).vocab_size)
    whole = estimate(cfg, shape, prompt_tokens=prompt_tokens).peak.total
    return (whole - PROCESS_BYTES) / 2**20, whole / 2**20


def run_strategy(plan: FSDPPlan, strategy: str, world: int) -> dict[str, Any]:
    """Both ranks' figures under `strategy`, measured in fresh processes."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory(prefix="bench-fsdp-") as tmp:
        out = str(Path(tmp) / "out.pt")
        mp.start_processes(
            _rank,
            args=(world, str(Path(tmp) / "rdv"), plan, strategy, out),
            nprocs=world,
            start_method="spawn",
        )
        return torch.load(out)


def bench_fsdp(plan: FSDPPlan) -> dict[str, Any]:
    section = new_section("fsdp", TITLE, owns=HEADLINE)
    world = min(plan.world, torch.cuda.device_count()) if torch.cuda.is_available() else plan.world
    if world < 2:
        section["status"] = "skipped"
        section["error"] = f"fsdp needs 2 ranks; this machine has {torch.cuda.device_count()} CUDA device"
        return section
    prompt_tokens = 4 * 6 + 2  # at most 4 plies of SAN (the data here) and BOS/SEP
    results = {name: run_strategy(plan, name, world) for name in STRATEGIES}
    rows = []
    for name in STRATEGIES:
        estimate_mb, whole_mb = _estimate_mb(plan, name, world, prompt_tokens)
        for rank, r in enumerate(results[name]["ranks"]):
            rows.append([
                name, rank, r["step_s"] * 1e3, r["state_mb"], r["peak_mb"], estimate_mb,
                r.get("process_peak_mb"), whole_mb,
            ])  # fmt: skip
    add_table(
        section,
        f"GRPO step per rank at world {world} ({results['ddp']['params'] / 1e6:.1f}M parameters, fp32, "
        f"{plan.prompts_per_rank} prompts x {plan.group_size} per rank, {plan.max_new_tokens} new tokens)",
        [
            "strategy", "rank", "step (ms)", "training state (MiB)", "peak (MiB)", "plan's estimate (MiB)",
            "process peak (MiB)", "plan's estimate with its process term (MiB)",
        ],
        rows,
    )  # fmt: skip
    ddp, fsdp = results["ddp"]["ranks"], results["fsdp"]["ranks"]
    section["data"] = {"plan": plan.__dict__, "world": world, "results": results}
    section["notes"].append(
        f"peak: {ddp[0]['method']}; the plan's estimate leaves out the process's own term. Beside the "
        "tensors the plan counts, a CPU process grows over its first steps by what the libraries keep "
        "outside them (the heap of small blocks, gloo's and the math libraries' buffers), which the "
        "plan leaves to that term"
    )
    if "process_peak_mb" in ddp[0]:
        section["notes"].append(
            "process peak: ru_maxrss of the whole rank process (interpreter, libraries and all), against "
            "the plan's estimate with its process term"
        )
    section["notes"].append(
        f"fsdp over ddp per rank: training state {fsdp[0]['state_mb'] / ddp[0]['state_mb']:.2f}x, "
        f"peak {fsdp[0]['peak_mb'] / ddp[0]['peak_mb']:.2f}x, step time {fsdp[0]['step_s'] / ddp[0]['step_s']:.2f}x"
    )
    return section
