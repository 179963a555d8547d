"""The `smoke` preset's trainer under fsdp at world 2 makes the steps of ddp at world 2, each rank
holding half the training state, and what the memory plan says it holds.

The same function runs in 2 spawned gloo ranks, once per strategy: the preset's trainer (6 SFT
steps of 16 pairs, 4 GRPO steps of 4 prompts x 4, fp32) with the FEN reward in process. Its
records are compared within float rounding (the sharded gradient norm sums its parts in another
order, and clipping carries that into the weights: 1e-5 relative), and each rank's parameter +
gradient + optimiser bytes (`trainer.strategy.footprint`) are measured after the last step: the
two fsdp ranks hold one copy between them, each about half of a ddp rank's, and each rank holds
what the memory plan's terms (weights, gradients, AdamW's moments) say it holds. The same
strategies through Ray Train, in whole runs: `test_train_fsdp_runs.py`.
"""

from __future__ import annotations

import pytest
import torch

from rewards import score_totals
from service.config import load_config, trainer_config
from service.memory_plan import estimate
from service.model_shape import model_shape
from tests.trainer.ranks import spawn_ranks
from trainer.data.chess_games import CHESS_ALPHABET, generate_pairs
from trainer.distributed import gather_json
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.schedule import Schedule
from trainer.strategy import StrategyConfig
from trainer.strategy.footprint import rank_state_bytes

SMOKE = load_config("smoke", overrides=["scaling.num_workers=2", "precision.dtype=fp32"])
TIMING = {"sample_s", "ref_s", "reward_wait_s", "update_s", "step_time_s", "completions_per_s"}


def smoke_steps(strategy: str, out_path: str) -> None:
    """The smoke preset's SFT and GRPO steps on this rank under `strategy`; rank 0 saves the records
    and every rank's footprint."""
    cfg = trainer_config(SMOKE)
    task = SMOKE.task
    trainer = Trainer(cfg, CharTokenizer(CHESS_ALPHABET), strategy=StrategyConfig(name=strategy))
    pairs = generate_pairs(200, seed=cfg.data.seed, min_plies=task.min_plies, max_plies=task.max_plies)
    records = []
    for step in range(cfg.sft.steps):
        batch = cfg.sft.batch_size
        records.append(trainer.sft_step(pairs[step * batch : (step + 1) * batch]))
    for step in range(cfg.grpo.steps):
        n = cfg.grpo.prompts_per_step
        prompts = pairs[100 + step * n : 100 + (step + 1) * n]
        records.append(trainer.grpo_step(prompts, InlineRewards(score_totals)))
    footprint = rank_state_bytes(trainer.model, [o.optimizer for o in trainer.optimizers.values()])
    footprints = gather_json(footprint, trainer.device)
    if trainer.rank == 0:
        torch.save({"records": records, "footprints": footprints, "world": trainer.world}, out_path)


def _both_strategies(rank: int, world: int, out_dir: str) -> None:
    for strategy in ("ddp", "fsdp"):
        smoke_steps(strategy, f"{out_dir}/{strategy}.pt")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp_smoke")
    spawn_ranks(_both_strategies, str(tmp / "rendezvous"), (str(tmp),))
    return {strategy: torch.load(tmp / f"{strategy}.pt") for strategy in ("ddp", "fsdp")}


def test_smoke_under_fsdp_makes_the_steps_of_ddp(runs):
    ddp, fsdp = runs["ddp"], runs["fsdp"]
    assert ddp["world"] == fsdp["world"] == 2
    assert len(ddp["records"]) == Schedule.of(trainer_config(SMOKE)).total
    for step, (a, b) in enumerate(zip(ddp["records"], fsdp["records"], strict=True), start=1):
        assert a.keys() == b.keys(), step  # the same record keys under either strategy
        for key, value in a.items():
            if key in TIMING:
                continue
            expected = pytest.approx(value, rel=1e-5, abs=1e-7) if isinstance(value, float) else value
            assert b[key] == expected, (step, key)


def test_each_fsdp_worker_holds_half_of_a_ddp_workers_training_state(runs):
    ddp, fsdp = runs["ddp"]["footprints"], runs["fsdp"]["footprints"]
    print("parameter + gradient + optimiser bytes per rank: ddp", ddp, "fsdp", fsdp)
    assert ddp[0] == ddp[1] and ddp[0]["total"] > 0
    for part in ("params", "grads", "optimizer", "total"):
        assert fsdp[0][part] + fsdp[1][part] == ddp[0][part], part  # one copy between the two
        for rank in (0, 1):
            assert fsdp[rank][part] == pytest.approx(ddp[0][part] / 2, rel=0.03), (part, rank)


def test_each_workers_training_state_is_what_the_memory_plan_holds_for_it(runs):
    shape = model_shape(SMOKE, CharTokenizer(CHESS_ALPHABET).vocab_size)
    for strategy in ("ddp", "fsdp"):
        held = estimate(SMOKE, shape, strategy).held
        planned = {
            "params": held["weights (fp32)"],
            "grads": held["gradients"],
            "optimizer": held["AdamW moments"],
        }
        for rank, measured in enumerate(runs[strategy]["footprints"]):
            for part, size in planned.items():  # fsdp: dim 0 splits into ceil and floor halves
                assert measured[part] == pytest.approx(size, rel=0.03), (strategy, rank, part)
