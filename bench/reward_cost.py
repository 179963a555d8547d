"""Section `reward-cost`: where the pool pays, by the cost of the reward.

Rewards of a known cost (`bench.cost_rewards`: the bundled FEN reward at ~0.02 ms, CPU
work of 1 and 5 ms, `async def` waits of 20 and 100 ms), each scored (a) alone: 1,024 items
in process (`Scorer.score_batch`, one item after another) and through pools of 1..16 workers
(async concurrency for the waiting ones); (b) inside whole GRPO steps of the reference
configuration (`bench.grpo`), scored inline or on a 2-worker pool: step time, reward time
on the critical path (submit + collect), reward share. The engine-judged move reward is a row of
(a). In-process timing of the waiting rewards is taken on fewer items and scaled (it is serial).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import chess
import ray

from actors.pool.config import PoolConfig
from actors.pool.placement import PROBE
from actors.pool.reward_pool import RewardPool
from bench.cost_rewards import COSTS
from bench.grpo import reference_config
from bench.grpo_trial import merge_trials
from bench.isolated import run_isolated
from bench.pool_workload import realistic_batch
from bench.results import add_table, new_section, set_headline
from bench.timing import interleaved_times, median
from rewards import EngineConfig, FenScorer, MoveScorer, RewardConfig, Scorer
from rewards.config import UserRewardSpec
from rewards.engine import EngineUnavailable, find_engine
from trainer.data.chess_games import generate_pairs

TITLE = "8. Reward cost: inline or on the pool"
HEADLINE = (
    "pool2_vs_inprocess_1ms",
    "reward_wait_fraction_io20ms",
    "inline_reward_fraction_io20ms",
    "auto_vs_best",
)
AUTO_COST = "fen (~0.02 ms CPU)"  # auto_vs_best is read on the bundled reward
_TRIAL = "bench.grpo_trial:run_trial"


@dataclass(frozen=True)
class RewardCostPlan:
    items: int = 1024
    worker_counts: tuple[int, ...] = (1, 2, 4, 8, 16)
    repeats: int = 3
    warmup: int = 1
    concurrency: int = 64  # items a worker has in flight for a waiting reward
    inline_wait_items: int = 128  # a waiting reward in process is serial: timed on these, scaled
    grpo_costs: tuple[str, ...] = ("fen (~0.02 ms CPU)", "cpu 1 ms", "io 20 ms (async)")
    grpo_steps: int = 3
    grpo_warmup: int = 1
    grpo_rounds: int = 2  # every (reward, placement) trial once per round, alternating: load hits all alike
    max_new_tokens: int = 64
    engine_positions: int = 32
    alone_costs: tuple[str, ...] = tuple(COSTS)  # rewards measured alone (the engine row aside)
    max_cpu_workers: int = 16  # CPU-bound rewards stop at this pool size (past the cores they only queue)


def _reward(spec: str | None) -> RewardConfig:
    return RewardConfig(user=[UserRewardSpec(fn=spec)] if spec else [])


def _pool_cfg(workers: int, concurrency: int, prefix: str) -> PoolConfig:
    cpus = ray.cluster_resources().get("CPU", 2.0)
    return PoolConfig(
        num_workers=workers,
        cpus_per_worker=min(0.5, cpus / workers),
        min_chunk_size=16,
        concurrency_per_worker=concurrency,
        chunk_timeout_s=120.0,
        collect_timeout_s=1200.0,
        name_prefix=f"{prefix}-w{workers}",
    )


def _alone(plan: RewardCostPlan, scorer: Scorer, items: tuple[list, list, list | None], prefix: str) -> dict:
    """Seconds per batch: in process, then each pool size (pools one at a time: 16 workers are many)."""
    completions, targets, fields = items
    n = len(completions)
    m = min(n, plan.inline_wait_items) if scorer.concurrent else n
    inline = interleaved_times(
        {
            "in process": lambda r: scorer.score_batch(
                completions[:m], targets[:m], None if fields is None else fields[:m]
            )
        },
        plan.repeats,
        plan.warmup,
    )["in process"]
    out = {"in process": [t * n / m for t in inline]}
    for w in plan.worker_counts:
        if w > plan.max_cpu_workers and not scorer.concurrent:
            continue
        with RewardPool.create(scorer, _pool_cfg(w, plan.concurrency, prefix), run_id=prefix) as pool:
            out[f"pool w={w}"] = interleaved_times(
                {"pool": lambda r, p=pool: p.collect([p.submit(completions, targets, fields=fields)])},
                plan.repeats,
                plan.warmup,
            )["pool"]
    return out


def _engine_items(positions: int) -> tuple[list, list, list]:
    completions, fields = [], []
    for pair in generate_pairs(positions, seed=5, min_plies=2, max_plies=10):
        board = chess.Board(pair.target)
        for move in sorted(board.legal_moves, key=lambda mv: mv.uci())[:8]:
            completions.append(board.san(move))
            fields.append({"fen": pair.target})
    return completions, [None] * len(completions), fields


def _grpo(plan: RewardCostPlan) -> dict[str, dict[str, Any]]:
    """Whole GRPO steps per (cost, inline | pool of 2), each in a process of its own."""
    base = reference_config(0, plan.max_new_tokens)
    gcs = ray.get_runtime_context().gcs_address
    pool_cfg = {
        "num_workers": 2,
        "cpus_per_worker": 0.5,
        "min_chunk_size": 16,
        "concurrency_per_worker": plan.concurrency,
    }
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(plan.grpo_rounds):
        for cost in plan.grpo_costs:
            spec, _ = COSTS[cost]
            # auto probes both sides in its first steps: they are its warm-up here
            for kind in ("inline", "pool", "auto") if cost == AUTO_COST else ("inline", "pool"):
                warmup = max(plan.grpo_warmup, len(PROBE)) if kind == "auto" else plan.grpo_warmup
                kwargs = {"trainer_cfg": base, "rewards": kind, "steps": plan.grpo_steps, "warmup": warmup,
                          "threads": 2, "pool_cfg": pool_cfg, "gcs_address": gcs, "reward": _reward(spec).model_dump()}  # fmt: skip
                runs.setdefault(f"{cost} | {kind}", []).append(run_isolated(_TRIAL, kwargs))
    return {name: merge_trials(trials) for name, trials in runs.items()}


def bench_reward_cost(plan: RewardCostPlan) -> dict[str, Any]:
    """Run the section (needs `ray.init` done by the caller)."""
    if not ray.is_initialized():
        raise RuntimeError("the reward-cost section needs Ray: call ray.init(...) first")
    section = new_section("reward-cost", TITLE, owns=HEADLINE)
    prefix = f"cost-{uuid.uuid4().hex[:6]}"
    completions, targets = realistic_batch(plan.items, seed=17)
    alone = {}
    for cost in plan.alone_costs:
        spec, _ = COSTS[cost]
        alone[cost] = _alone(plan, FenScorer(_reward(spec)), (completions, targets, None), prefix)
    if plan.engine_positions:
        alone.update(_engine_row(plan, prefix, section))
    _alone_table(section, alone, plan)
    try:
        grpo = _grpo(plan)
    except Exception as exc:  # keep the figures measured alone
        section["notes"].append(f"GRPO trials failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        grpo = {}
    if grpo:
        _grpo_table(section, grpo)
    section["data"] = {
        "alone_s": alone,
        "grpo": {k: {x: v for x, v in r.items() if x != "steps"} for k, r in grpo.items()},
    }
    _headline(section, alone, grpo)
    return section


def _engine_row(plan: RewardCostPlan, prefix: str, section: dict[str, Any]) -> dict[str, dict]:
    try:
        find_engine(None)
    except EngineUnavailable as exc:
        section["notes"].append(f"No engine row: {exc}")
        return {}
    scorer = MoveScorer(engine=EngineConfig())
    items = _engine_items(plan.engine_positions)
    try:
        return {f"engine move ({len(items[0])} items)": _alone(plan, scorer, items, prefix)}
    finally:
        scorer.close()


def _alone_table(
    section: dict[str, Any], alone: dict[str, dict[str, list[float]]], plan: RewardCostPlan
) -> None:
    columns = ["reward", "in process ms/item", *(f"pool w={w} speed-up" for w in plan.worker_counts)]
    rows = []
    for cost, times in alone.items():
        n = plan.items if not cost.startswith("engine") else int(cost.split("(")[1].split()[0])
        inline = median(times["in process"])
        pools = (times.get(f"pool w={w}") for w in plan.worker_counts)
        rows.append([cost, inline * 1e3 / n, *(inline / median(t) if t else "-" for t in pools)])
    add_table(
        section, f"Reward alone: {plan.items:,} items (speed-up = in-process time / pool time)", columns, rows
    )


def _grpo_table(section: dict[str, Any], grpo: dict[str, dict[str, Any]]) -> None:
    rows = [
        [name, r["step_s"], r["reward_critical_s"], r["reward_fraction"], r["completions_per_s"]]
        for name, r in grpo.items()
    ]
    rounds = max(r.get("runs", 1) for r in grpo.values())
    title = f"Inside whole GRPO steps (reference configuration, fresh policy; medians over {rounds} alternating round(s))"
    add_table(section, title,
              ["reward | scored", "step s", "reward on the critical path s", "reward share", "completions/s"], rows)  # fmt: skip


def _headline(section: dict[str, Any], alone: dict, grpo: dict) -> None:
    one = alone.get("cpu 1 ms", {})
    if "pool w=2" in one:
        set_headline(section, "pool2_vs_inprocess_1ms", median(one["in process"]) / median(one["pool w=2"]))
    else:
        set_headline(section, "pool2_vs_inprocess_1ms", None, "no 2-worker pool in this plan")
    io = "io 20 ms (async)"
    for key, kind in (("reward_wait_fraction_io20ms", "pool"), ("inline_reward_fraction_io20ms", "inline")):
        trial = grpo.get(f"{io} | {kind}")
        if trial is None:
            set_headline(section, key, None, f"no GRPO trial of {io} {kind} in this plan")
        else:
            set_headline(section, key, trial["reward_fraction"])
    trials = [grpo.get(f"{AUTO_COST} | {kind}") for kind in ("auto", "inline", "pool")]
    if None in trials:
        set_headline(
            section, "auto_vs_best", None, f"no GRPO trials of {AUTO_COST} auto, inline and pool in this plan"
        )
    else:
        auto, inline, pool = (t["step_s"] for t in trials)
        set_headline(section, "auto_vs_best", auto / min(inline, pool))
