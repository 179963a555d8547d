"""Section 1: reward throughput in process and through the reward pool.

In process: a plain loop of `Scorer.score` and the batched `Scorer.score_batch`. Through the
pool: `submit` + `collect` (what the trainer does) with 1..M workers at the default chunk size,
then a chunk-size sweep at the largest worker count, and the cost of one dispatch. Every round
scores a fresh realistic batch (`bench.workload`), the same batch for every variant of the round;
each variant has its own memo (a different scorer or worker), so no variant is helped by
another's cache, and no round by the previous one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import ray

from actors.pool.config import PoolConfig
from actors.pool.reward_pool import RewardPool
from actors.pool.work import plan_chunks
from bench.pool_workload import bench_pool_config, dispatch_overhead, realistic_batch
from bench.results import add_table, new_section, set_headline
from bench.timing import interleaved_times, median
from rewards import FenScorer, RewardConfig

HEADLINE_WORKERS = 2
TARGET_POOL_SPEEDUP = 1.6


@dataclass(frozen=True)
class RewardPlan:
    items: int = 4096
    worker_counts: tuple[int, ...] = (1, 2)
    chunk_sizes: tuple[int, ...] = (64, 256, 1024, 4096)
    repeats: int = 5
    warmup: int = 1
    dispatch_calls: int = 100
    seed: int = 0


def _pool(workers: int, chunk: int, prefix: str) -> RewardPool:
    return RewardPool.create(RewardConfig(), bench_pool_config(workers, chunk, prefix), run_id=prefix)


def _through(pool: RewardPool, batches: list[tuple[list[str], list[str]]]):
    """One round through the pool the way the trainer uses it: submit, then collect."""
    return lambda r: pool.collect([pool.submit(*batches[r])])


def _scaling(plan: RewardPlan, batches: list, prefix: str) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """In-process loop and batch against pools of each worker count, interleaved round by round."""
    scorer = FenScorer(RewardConfig())
    chunk = PoolConfig().chunk_size
    pools = {w: _pool(w, chunk, prefix) for w in plan.worker_counts}
    try:
        variants = {
            "score loop": lambda r: [scorer.score(c, t) for c, t in zip(*batches[r], strict=True)],
            "score_batch": lambda r: scorer.score_batch(*batches[r]),
        }
        variants.update({f"pool w={w}": _through(p, batches) for w, p in pools.items()})
        times = interleaved_times(variants, plan.repeats, plan.warmup)
        dispatch = dispatch_overhead(pools[min(pools)], plan.dispatch_calls) if plan.dispatch_calls else {}
    finally:
        for p in pools.values():
            p.shutdown()
    return times, dispatch


def _sweep(plan: RewardPlan, batches: list, prefix: str) -> dict[int, dict[str, list[float]]]:
    """Each chunk size with the most workers, interleaved with in-process score_batch."""
    workers = max(plan.worker_counts)
    out = {}
    for chunk in plan.chunk_sizes:
        scorer = FenScorer(RewardConfig())  # a fresh memo, like the fresh workers
        with _pool(workers, chunk, prefix) as pool:
            out[chunk] = interleaved_times(
                {
                    "score_batch": lambda r, s=scorer: s.score_batch(*batches[r]),
                    "pool": _through(pool, batches),
                },
                plan.repeats,
                plan.warmup,
            )
    return out


def bench_reward(plan: RewardPlan) -> dict[str, Any]:
    """Run section 1 (needs `ray.init` done by the caller) and return it as a section dict."""
    if not ray.is_initialized():
        raise RuntimeError("the reward section needs Ray: call ray.init(...) first")
    section = new_section("reward", "1. Reward scoring", owns=("pool2_vs_inprocess",))
    n = plan.items
    batches = [realistic_batch(n, plan.seed + 7919 * r) for r in range(plan.warmup + plan.repeats)]
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    times, dispatch = _scaling(plan, batches, prefix)
    sweep = _sweep(plan, batches, prefix) if plan.chunk_sizes else {}
    rates = {name: n / median(ts) for name, ts in times.items()}
    base = rates["score_batch"]
    one = rates.get("pool w=1")
    rows = []
    for name, rate in rates.items():
        workers = int(name.split("=")[1]) if name.startswith("pool") else None
        eff = rate / (workers * one) if workers and one else None
        rows.append([name, workers or "-", rate, rate / base, eff])
    add_table(
        section,
        f"Throughput, {n:,} completions (pool chunk size {PoolConfig().chunk_size})",
        ["scorer", "workers", "completions/s", "vs score_batch", "scaling efficiency"],
        rows,
    )
    sweep_rows = []
    for chunk, ts in sweep.items():
        pool_rate, in_rate = n / median(ts["pool"]), n / median(ts["score_batch"])
        chunks = len(plan_chunks(n, chunk, min(chunk, PoolConfig().min_chunk_size), max(plan.worker_counts)))
        sweep_rows.append([chunk, chunks, pool_rate, pool_rate / in_rate])
    if sweep_rows:
        add_table(
            section,
            f"Chunk-size sweep, {max(plan.worker_counts)} workers, {n:,} completions",
            ["chunk size", "chunks", "completions/s", "vs score_batch (same rounds)"],
            sweep_rows,
        )
    overhead = _overhead_rows(times, dispatch, n, one is not None)
    if overhead:
        add_table(section, "Cost of one dispatch", ["measure", "ms"], overhead)
    section["data"] = {
        "items": n,
        "rates": rates,
        "times_s": times,
        "sweep_times_s": {str(k): v for k, v in sweep.items()},
        "dispatch": dispatch,
        "repeats": plan.repeats,
        "warmup": plan.warmup,
    }
    _headline(section, rates, base)
    return section


def _overhead_rows(times: dict[str, list[float]], dispatch: dict[str, float], n: int, have_one: bool) -> list:
    labels = {"pool_1_item_ms": "one item: pool submit + collect", "actor_call_ms": "bare actor call (ping)"}
    rows = [[labels.get(k, k), v] for k, v in dispatch.items()]
    if have_one:
        chunk = PoolConfig().chunk_size
        chunks = len(plan_chunks(n, chunk, PoolConfig().min_chunk_size, 1))
        extra = median(times["pool w=1"]) - median(times["score_batch"])
        rows.append(
            [f"pool w=1 over score_batch, per chunk of {chunk} ({chunks} chunks)", extra * 1e3 / chunks]
        )
    return rows


def _headline(section: dict[str, Any], rates: dict[str, float], base: float) -> None:
    key = f"pool w={HEADLINE_WORKERS}"
    if key not in rates:
        set_headline(section, "pool2_vs_inprocess", None, f"no {HEADLINE_WORKERS}-worker pool in this plan")
        return
    ratio = rates[key] / base
    set_headline(section, "pool2_vs_inprocess", ratio)
    one = rates.get("pool w=1")
    if one:
        section["notes"].append(
            f"One worker reaches {one / base:.2f}x in-process score_batch (the cost of shipping chunks and "
            f"results); {HEADLINE_WORKERS} workers reach {rates[key] / one:.2f}x one worker."
        )
    if ratio < TARGET_POOL_SPEEDUP:
        section["notes"].append(
            f"Below the {TARGET_POOL_SPEEDUP}x target: the workers share the machine's cores with this "
            "process (and anything else running), so scaling past one worker needs idle cores."
        )
