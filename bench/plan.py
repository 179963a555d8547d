"""What a benchmark run measures: the sizes and repeats of each section, quick or full."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.async_sampling import AsyncPlan
from bench.autoscale import AutoscalePlan
from bench.cost_curve import CostCurvePlan
from bench.episodes import EnvPlan
from bench.fsdp import FSDPPlan
from bench.grpo import GRPOPlan
from bench.hf import HFPlan
from bench.machine import usable_cores
from bench.peer import PeerPlan
from bench.reward import RewardPlan
from bench.reward_cost import RewardCostPlan
from bench.sampling import SamplingPlan
from bench.sandbox import SandboxPlan
from bench.train_step import TrainStepPlan

SECTIONS = ("reward", "sampling", "train_step", "grpo", "hf", "reward-cost", "sandbox")
# run only when asked for by name (`--sections peer`)
OPTIONAL_SECTIONS = ("peer", "cost-curve", "env", "fsdp", "async", "autoscale")


def worker_counts(max_workers: int = 8) -> tuple[int, ...]:
    """1..M reward workers, M = the usable cores (at least 2, for the headline's 2-worker pool)."""
    return tuple(range(1, max(2, min(usable_cores(), max_workers)) + 1))


@dataclass(frozen=True)
class BenchPlan:
    mode: str
    reward: RewardPlan
    sampling: SamplingPlan
    train_step: TrainStepPlan
    grpo: GRPOPlan
    hf: HFPlan = HFPlan()
    peer: PeerPlan = field(default_factory=PeerPlan)
    reward_cost: RewardCostPlan = field(default_factory=RewardCostPlan)
    sandbox: SandboxPlan = field(default_factory=SandboxPlan)
    cost_curve: CostCurvePlan = field(default_factory=CostCurvePlan)
    env: EnvPlan = field(default_factory=EnvPlan)
    fsdp: FSDPPlan = field(default_factory=FSDPPlan)
    async_sampling: AsyncPlan = field(default_factory=AsyncPlan)
    autoscale: AutoscalePlan = field(default_factory=AutoscalePlan)
    sections: tuple[str, ...] = field(default=SECTIONS)

    def __post_init__(self) -> None:
        allowed = SECTIONS + OPTIONAL_SECTIONS
        unknown = [s for s in self.sections if s not in allowed]
        if unknown or not self.sections:
            raise ValueError(
                f"sections must be a non-empty subset of {list(allowed)}, got {list(self.sections)}"
            )


def quick_plan() -> BenchPlan:
    """Every default section at its smallest useful size, each headline key still measured."""
    return BenchPlan(
        mode="quick",
        reward=RewardPlan(worker_counts=(1, 2), chunk_sizes=(256, 1024), repeats=3, dispatch_calls=50),
        sampling=SamplingPlan(sizes=("tiny",), repeats=3),  # `small` uncached: the slowest row
        train_step=TrainStepPlan(steps=3, warmup=1, emulated_bf16=False),
        grpo=GRPOPlan(steps=3, warmup=1, baseline_steps=1, sft_steps=100, extras=False, unshipped_rows=False),
        peer=PeerPlan(rounds=1, peer_steps=4),
        reward_cost=RewardCostPlan(
            worker_counts=(1, 2),
            alone_costs=("fen (~0.02 ms CPU)", "cpu 1 ms", "io 20 ms (async)"),  # the headline's rewards
            engine_positions=16,
            repeats=1,
            inline_wait_items=16,
            grpo_costs=("fen (~0.02 ms CPU)", "io 20 ms (async)"),
            grpo_steps=2,
            grpo_rounds=1,
        ),
        sandbox=SandboxPlan(executions=100, slow_executions=20, rounds=3),
        fsdp=FSDPPlan(steps=2),
        async_sampling=AsyncPlan(steps=4, rounds=1),
        autoscale=AutoscalePlan(steps=24, rounds=1),
    )


def full_plan() -> BenchPlan:
    """More repeats and rounds, every sweep and section 4's extra rows."""
    return BenchPlan(
        mode="full",
        reward=RewardPlan(worker_counts=worker_counts(), repeats=15, dispatch_calls=200),
        sampling=SamplingPlan(repeats=5),
        train_step=TrainStepPlan(steps=10, warmup=3, rounds=2),
        grpo=GRPOPlan(steps=6, warmup=2, baseline_steps=3, sft_steps=300, extras=True, rounds=2),
        hf=HFPlan(steps=6, warmup=2),
        peer=PeerPlan(rounds=3, peer_steps=12),
        fsdp=FSDPPlan(steps=5),
        async_sampling=AsyncPlan(steps=12, rounds=3),
        autoscale=AutoscalePlan(steps=48, rounds=2),
    )
