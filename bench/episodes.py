"""Section `env`: GRPO steps whose samples are multi-turn episodes, and what waiting on the
environments costs.

The tiny GPT is warmed up on the `guess` environment's demonstrations (so episodes last several
turns), its state kept; every row then starts from that state and runs the same GRPO steps (the
same episodes: each sample's noise is keyed by its step), alternating in rounds:
- environments: `guess` (microseconds a step) and `guess` with a 20 ms tool call in each step
  (`SlowGuess`: a sleep, as an I/O-bound tool or a remote service would cost), stepped one episode
  after another or up to 16 at once (`concurrent_steps`);
- hosting: in the trainer process (`local`) and on a pool of 2 reward workers (`pool`), each
  episode's calls going to its worker.
A step's prompts are two micro-batches: on the pool they decode interleaved, one decoding while
the other's environments answer (`trainer.sampling.episodes.generate_episode_batches`); in process
the answers come at once and the micro-batches decode one after the other.
Per row: seconds per step, the part spent sampling, the time sampling waited on the environments
(`env_wait_s`) and its share of the step, episodes and policy tokens per second, turns per episode.
"""

from __future__ import annotations

import copy
import time
import uuid
from dataclasses import dataclass
from typing import Any

import ray
import torch

from bench.results import add_table, new_section, set_headline
from bench.timing import median
from rewards.env.guess import GuessNumber
from rewards.env.host import LocalEpisodes
from trainer.config import TrainerConfig
from trainer.data.pairs import EpisodePair
from trainer.engine import Trainer
from trainer.policy.char_tokenizer import CharTokenizer

TITLE = "11. Multi-turn episodes: waiting on the environments"
HEADLINE = ("env_wait_fraction",)
TOOL_S = 0.020
ENVS = {
    "guess": "guess",
    "guess + 20 ms tool": "bench.episodes:SlowGuess",
    "guess + 20 ms tool, 16 at once": "bench.episodes:ConcurrentSlowGuess",
}


class SlowGuess(GuessNumber):
    """`guess` whose every step waits TOOL_S, as a tool call would."""

    concurrent_steps = 1

    def step(self, action: str):
        time.sleep(TOOL_S)
        return super().step(action)


class ConcurrentSlowGuess(SlowGuess):
    """The same tool call, up to 16 episodes' steps at once in a process (`concurrent_steps`)."""

    concurrent_steps = 16


@dataclass(frozen=True)
class EnvPlan:
    sft_steps: int = 150
    steps: int = 3  # measured GRPO steps per row and round
    warmup: int = 1
    rounds: int = 2
    prompts: int = 8
    group_size: int = 8


def _config(plan: EnvPlan) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "model": {"size": "tiny", "block_size": 64},
            # two micro-batches: on the pool one decodes while the other's environments answer
            "sampling": {
                "group_size": plan.group_size,
                "max_new_tokens": 48,
                "prompts_per_microbatch": max(1, plan.prompts // 2),
            },
            "grpo": {"prompts_per_step": plan.prompts, "beta": 0.04},
            "sft": {"steps": plan.sft_steps, "batch_size": 64, "lr": 0.002, "warmup_steps": 20},
            "optim": {"lr": 1e-4},
            "precision": {"dtype": "fp32"},
        }
    )


def _pairs(first: int, n: int, with_demos: bool) -> list[EpisodePair]:
    """Rows of the guess game (demonstrations laid out as the env task does, for the warm start)."""
    import random

    from service.tasks.env import EnvTask

    task = EnvTask(env="guess", max_turns=6, reward_mode="sum", step_timeout_s=10.0, hosting="local",
                   stops=("\n",), seed=0, chars=GuessNumber.alphabet)  # fmt: skip
    out = []
    for i in range(first, first + n):
        row = GuessNumber.generate_row(i, 0)
        out.append(task.pair(row, i) if with_demos else task.prompt_pair(row))
    random.Random(0).shuffle(out)
    return out


def _pool(env: str):
    """Two workers that each keep the environment's episodes, as a run's pool does for an `env` task."""
    from actors.pool.config import PoolConfig
    from actors.pool.worker_pool import WorkerPool
    from rewards.env.remote import EpisodeServer

    cfg = PoolConfig(num_workers=2, cpus_per_worker=0.5, name_prefix=f"bench-env-{uuid.uuid4().hex[:6]}")
    return WorkerPool.create(EpisodeServer(env, max_turns=6), cfg, run_id="bench-env")


def _row(trainer: Trainer, start: dict[str, Any], plan: EnvPlan) -> list[dict[str, float]]:
    """warmup + steps GRPO steps from the warm start; the measured steps' records."""
    trainer.load_state_dict(start)
    records = []
    for s in range(plan.warmup + plan.steps):
        record = trainer.grpo_step(_pairs(100_000 + s * plan.prompts, plan.prompts, False), rewards=None)
        if s >= plan.warmup:
            records.append(record)
    return records


def bench_env(plan: EnvPlan) -> dict[str, Any]:
    """Run the section (the pool rows need `ray.init` done by the caller)."""
    section = new_section("env", TITLE, owns=HEADLINE)
    torch.manual_seed(0)
    trainer = Trainer(_config(plan), CharTokenizer(GuessNumber.alphabet + "\n"), stop=["\n"])
    for step in range(plan.sft_steps):
        trainer.sft_step(_pairs(step * 64, 64, True))
    start = copy.deepcopy(trainer.state_dict())  # the warm start every row begins from
    hosts = {(env, "local"): LocalEpisodes(spec, max_turns=6) for env, spec in ENVS.items()}
    pools = {env: _pool(spec) for env, spec in ENVS.items()} if ray.is_initialized() else {}
    try:
        from actors.pool.episodes import PoolEpisodes

        for env, pool in pools.items():
            hosts[(env, "pool")] = PoolEpisodes(lambda p=pool: p, max_turns=6)
        runs: dict[tuple[str, str], list[dict[str, float]]] = {}
        for round_index in range(plan.rounds):
            keys = sorted(hosts) if round_index % 2 == 0 else sorted(hosts, reverse=True)
            for key in keys:
                trainer.sampler.episodes = hosts[key]
                runs.setdefault(key, []).extend(_row(trainer, start, plan))
    finally:
        for pool in pools.values():
            pool.shutdown()
    rows, shares = [], {}
    for (env, hosting), records in sorted(runs.items()):
        step = median([r["step_time_s"] for r in records])
        wait = median([r["env_wait_s"] for r in records])
        shares[(env, hosting)] = median([r["env_wait_s"] / r["step_time_s"] for r in records])
        rows.append([
            env, hosting, step, median([r["sample_s"] for r in records]), wait, shares[(env, hosting)],
            median([r["completions"] / r["step_time_s"] for r in records]),
            median([float(r["tokens"]) / r["step_time_s"] for r in records]),
            median([r["turns_mean"] for r in records]), median([r["success_rate"] for r in records]),
        ])  # fmt: skip
    add_table(
        section,
        f"A GRPO step of {plan.prompts} prompts x {plan.group_size} episodes (median of {plan.rounds} rounds "
        f"x {plan.steps} steps, rows alternating; tiny GPT, fp32, after {plan.sft_steps} SFT steps)",
        ["environment", "hosting", "step s", "sampling s", "env wait s", "env wait share", "episodes/s",
         "policy tokens/s", "turns", "success"],
        rows,
    )  # fmt: skip
    section["notes"].append(
        "a micro-batch waits for each decoding step's answers before it decodes on (on the pool the other "
        "micro-batch decodes meanwhile); a worker steps its episodes one after another unless the "
        "environment allows more at once (concurrent_steps)"
    )
    key = ("guess + 20 ms tool, 16 at once", "pool")
    if key in shares:
        set_headline(section, "env_wait_fraction", shares[key])
    else:
        set_headline(section, "env_wait_fraction", None, "no Ray here: the pool rows were not run")
    return section
