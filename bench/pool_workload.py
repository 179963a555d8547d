"""The reward pool's workload (realistic scored batches), its bench pools, and where a pool's time goes.

`measure_pool` needs a running Ray (`ray.init(...)`); it starts and stops its own pools under a
unique name prefix. Every timing is the median of `repeats` runs, each on fresh data (new
targets and completions), so no run is helped by a memo warmed by the previous one.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

import ray

from actors.pool.config import PoolConfig
from actors.pool.reward_pool import RewardPool
from actors.pool.work import plan_chunks
from bench.timing import median
from bench.workload import realistic_completions
from rewards import FenScorer, RewardConfig
from trainer.data.chess_games import generate_pairs

GROUP_SIZE = 8  # completions per prompt, laid out group after group as the trainer submits them


def realistic_batch(n: int, seed: int, distinct_targets: int | None = None) -> tuple[list[str], list[str]]:
    """n (completion, target) items: K=8 completions per real FEN, mixed exact / near-miss / junk.

    Every group has its own position unless `distinct_targets` caps how many are drawn (then
    the groups cycle through them: cheaper to build, kinder to the memo).
    """
    groups = -(-n // GROUP_SIZE)
    drawn = groups if distinct_targets is None else min(groups, distinct_targets)
    fens = [p.target for p in generate_pairs(drawn, seed=seed, min_plies=1, max_plies=40)]
    targets = [fens[g % drawn] for g in range(groups) for _ in range(GROUP_SIZE)][:n]
    return realistic_completions(targets, seed=seed), targets


def _seconds(fn: Any, completions: list[str], targets: list[str]) -> float:
    began = time.perf_counter()
    fn(completions, targets)
    return time.perf_counter() - began


def _in_process(reward: RewardConfig, completions: list[str], targets: list[str]) -> None:
    FenScorer(reward).score_batch(completions, targets)  # a fresh memo: the batch is new to it


def bench_pool_config(workers: int, chunk: int, prefix: str) -> PoolConfig:
    """The pool every benchmark uses: `workers` workers, chunks of `chunk`, names under `prefix`."""
    return PoolConfig(
        num_workers=workers,
        chunk_size=chunk,
        min_chunk_size=min(chunk, PoolConfig().min_chunk_size),
        name_prefix=f"{prefix}-w{workers}c{chunk}",
    )


def dispatch_overhead(pool: RewardPool, calls: int = 200) -> dict[str, float]:
    """Median round trip of a 1-item submit+collect through the pool, and of a bare actor call."""
    fen = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
    one_item, bare = [], []
    handle = pool.worker_handles()[0]
    for _ in range(calls):
        began = time.perf_counter()
        pool.collect([pool.submit([fen], [fen])])
        one_item.append(time.perf_counter() - began)
        began = time.perf_counter()
        ray.get(handle.ping.remote(), timeout=30)  # one call awaited at a time, on purpose
        bare.append(time.perf_counter() - began)
    return {
        "pool_1_item_ms": median(one_item) * 1e3,
        "actor_call_ms": median(bare) * 1e3,
    }


def measure_pool(
    items: Sequence[int] = (4096, 16384),
    chunk_sizes: Sequence[int] = (64, 256, 1024, 4096),
    worker_counts: Sequence[int] = (1, 2),
    repeats: int = 3,
    reward: RewardConfig | None = None,
    seed: int = 0,
    dispatch_calls: int = 200,
) -> dict[str, Any]:
    """Completions per second in process and through pools of each size and chunk size.

    Each repeat times in-process `Scorer.score_batch` and the pool (submit + collect) back to
    back on the same fresh batch, so both see the same machine load; `speedup` is the median of
    the per-repeat ratios. Returns {"rows": [one dict per (items, workers, chunk_size): rates,
    speedup and where the time went (see `_compare`)], "dispatch": {...}, "worker_niceness",
    "cpus", "repeats"}.
    """
    if not ray.is_initialized():
        raise RuntimeError("measure_pool needs Ray: call ray.init(...) first")
    reward = reward or RewardConfig()
    data = {n: [realistic_batch(n, seed + 1000 * r + n) for r in range(repeats)] for n in items}
    warm = realistic_batch(256, seed - 1)
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    rows, dispatch = [], {}
    for workers in worker_counts:
        for chunk in chunk_sizes:
            cfg = bench_pool_config(workers, chunk, prefix)
            with RewardPool.create(reward, cfg, run_id=prefix) as pool:
                pool.score(*warm)
                for n in items:
                    rows.append(_compare(pool, cfg, reward, data[n]))
                if not dispatch:
                    dispatch = dispatch_overhead(pool, dispatch_calls)
    return {
        "rows": rows,
        "dispatch": dispatch,
        "worker_niceness": ray.get(_niceness.remote(), timeout=60),
        "cpus": ray.cluster_resources().get("CPU", 0.0),
        "repeats": repeats,
    }


def _worker_timings(pool: RewardPool) -> list[dict[str, float]]:
    return ray.get([h.timings.remote() for h in pool.worker_handles()], timeout=60)


def _pool_run(pool: RewardPool, completions: list[str], targets: list[str]) -> dict[str, float]:
    """One submit + collect, with how the workers spent it."""
    before = _worker_timings(pool)
    wall = _seconds(lambda c, t: pool.collect([pool.submit(c, t)]), completions, targets)
    after = _worker_timings(pool)
    busy = [a["busy_s"] - b["busy_s"] for a, b in zip(after, before, strict=True)]
    cpu = [a["cpu_s"] - b["cpu_s"] for a, b in zip(after, before, strict=True)]
    return {
        "wall_s": wall,
        "busiest_worker_s": max(busy),
        "busiest_worker_cpu_s": max(cpu),
        "worker_cpu_s": sum(cpu),
        "worker_busy_s": sum(busy),
    }


def _compare(
    pool: RewardPool, cfg: PoolConfig, reward: RewardConfig, batches: list[tuple[list[str], list[str]]]
) -> dict[str, Any]:
    """In-process and pool timings on the same batches, interleaved; medians over the batches."""
    inproc, inproc_cpu, runs = [], [], []
    n = len(batches[0][0])
    for completions, targets in batches:
        began_cpu = time.thread_time()
        inproc.append(_seconds(functools.partial(_in_process, reward), completions, targets))
        inproc_cpu.append(time.thread_time() - began_cpu)
        runs.append(_pool_run(pool, completions, targets))
    med = {k: median(r[k] for r in runs) for k in runs[0]}
    return {
        "items": n,
        "workers": cfg.num_workers,
        "chunk_size": cfg.chunk_size,
        "chunks": len(plan_chunks(n, cfg.chunk_size, cfg.min_chunk_size, cfg.num_workers)),
        "inprocess_items_per_s": n / median(inproc),
        "pool_items_per_s": n / med["wall_s"],
        "speedup": median(a / r["wall_s"] for a, r in zip(inproc, runs, strict=True)),
        # Where the pool's time goes (medians, seconds):
        "inprocess_s": median(inproc),
        "inprocess_cpu_s": median(inproc_cpu),  # < inprocess_s: the machine is shared
        "pool_wall_s": med["wall_s"],
        "busiest_worker_s": med["busiest_worker_s"],  # scoring on the critical path
        "outside_scoring_s": med["wall_s"] - med["busiest_worker_s"],  # dispatch, transport, results
        "worker_cpu_share": med["worker_cpu_s"] / max(med["worker_busy_s"], 1e-9),  # 1.0: never starved
        "busiest_worker_cpu_s": med["busiest_worker_cpu_s"],
        # The speedup if each process got a whole core whenever it ran: in-process CPU seconds over
        # the busiest worker's CPU seconds plus the wall time outside scoring.
        "cpu_bound_speedup": median(inproc_cpu)
        / (med["busiest_worker_cpu_s"] + med["wall_s"] - med["busiest_worker_s"]),
    }


@ray.remote(num_cpus=0)
def _niceness() -> int:
    """The scheduling niceness Ray gives its worker processes (its default is 15)."""
    return os.nice(0)
