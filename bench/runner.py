"""Run the sections of a plan, survive a failing one, and assemble bench.json's object."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ray

from bench.assemble import bench_result, run_section
from bench.async_sampling import HEADLINE as ASYNC_HEADLINE
from bench.async_sampling import TITLE as ASYNC_TITLE
from bench.async_sampling import bench_async
from bench.autoscale import HEADLINE as AUTOSCALE_HEADLINE
from bench.autoscale import TITLE as AUTOSCALE_TITLE
from bench.autoscale import bench_autoscale
from bench.cost_curve import HEADLINE as CURVE_HEADLINE
from bench.cost_curve import TITLE as CURVE_TITLE
from bench.cost_curve import bench_cost_curve
from bench.episodes import HEADLINE as ENV_HEADLINE
from bench.episodes import TITLE as ENV_TITLE
from bench.episodes import bench_env
from bench.fsdp import HEADLINE as FSDP_HEADLINE
from bench.fsdp import TITLE as FSDP_TITLE
from bench.fsdp import bench_fsdp
from bench.grpo import GRPO_HEADLINE, bench_grpo
from bench.hf import HEADLINE as HF_HEADLINE
from bench.hf import TITLE as HF_TITLE
from bench.hf import bench_hf
from bench.machine import machine_info, usable_cores
from bench.peer import HEADLINE as PEER_HEADLINE
from bench.peer import TITLE as PEER_TITLE
from bench.peer import bench_peer
from bench.plan import BenchPlan
from bench.reward import bench_reward
from bench.reward_cost import HEADLINE as COST_HEADLINE
from bench.reward_cost import TITLE as COST_TITLE
from bench.reward_cost import bench_reward_cost
from bench.sampling import HEADLINE as SAMPLING_HEADLINE
from bench.sampling import TITLE as SAMPLING_TITLE
from bench.sampling import bench_sampling
from bench.sandbox import HEADLINE as SANDBOX_HEADLINE
from bench.sandbox import TITLE as SANDBOX_TITLE
from bench.sandbox import bench_sandbox
from bench.train_step import HEADLINE as STEP_HEADLINE
from bench.train_step import TITLE as STEP_TITLE
from bench.train_step import bench_train_step

# section name -> (titles of the sections it produces, headline keys they own, how to run it)
_SECTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...], Callable[[BenchPlan], Any]]] = {
    "reward": (("1. Reward scoring",), ("pool2_vs_inprocess",), lambda p: bench_reward(p.reward)),
    "sampling": ((SAMPLING_TITLE,), SAMPLING_HEADLINE, lambda p: bench_sampling(p.sampling)),
    "train_step": ((STEP_TITLE,), STEP_HEADLINE, lambda p: bench_train_step(p.train_step)),
    "grpo": (
        ("4. A whole GRPO step", "5. Ablation: one optimisation at a time"),
        GRPO_HEADLINE,
        lambda p: bench_grpo(p.grpo),
    ),
    "hf": ((HF_TITLE,), HF_HEADLINE, lambda p: bench_hf(p.hf)),
    "peer": ((PEER_TITLE,), PEER_HEADLINE, lambda p: bench_peer(p.peer, p.grpo)),
    "reward-cost": ((COST_TITLE,), COST_HEADLINE, lambda p: bench_reward_cost(p.reward_cost)),
    "sandbox": ((SANDBOX_TITLE,), SANDBOX_HEADLINE, lambda p: bench_sandbox(p.sandbox)),
    "cost-curve": ((CURVE_TITLE,), CURVE_HEADLINE, lambda p: bench_cost_curve(p.cost_curve)),
    "env": ((ENV_TITLE,), ENV_HEADLINE, lambda p: bench_env(p.env)),
    "fsdp": ((FSDP_TITLE,), FSDP_HEADLINE, lambda p: bench_fsdp(p.fsdp)),
    "async": ((ASYNC_TITLE,), ASYNC_HEADLINE, lambda p: bench_async(p.async_sampling)),
    "autoscale": ((AUTOSCALE_TITLE,), AUTOSCALE_HEADLINE, lambda p: bench_autoscale(p.autoscale)),
}


def _run_section(name: str, plan: BenchPlan) -> list[dict[str, Any]]:
    titles, owns, fn = _SECTIONS[name]
    return run_section(name, titles, owns, lambda: fn(plan))


def run_bench(plan: BenchPlan, command: str) -> dict[str, Any]:
    """Every section of `plan`, in order; starts (and stops) a local Ray unless one is running."""
    began = time.perf_counter()
    info = machine_info()
    started_ray = False
    if not ray.is_initialized() and {"reward", "grpo", "peer", "reward-cost", "cost-curve", "env"} & set(
        plan.sections
    ):
        ray.init(
            num_cpus=max(4, usable_cores()),
            include_dashboard=False,
            logging_level="ERROR",
            log_to_driver=False,
        )
        started_ray = True
    try:
        sections = [s for name in plan.sections for s in _run_section(name, plan)]
    finally:
        if started_ray:
            ray.shutdown()
    return bench_result(sections, command, plan.mode, info, began)
