"""Sampler actors on a real local Ray: a trainer fed by them at max_staleness 0 trains as one that
samples itself; an actor that kept older weights is caught by the digest; an actor killed in the
middle of a step is replaced and the step comes back the same."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
import torch

from actors.pool.config import PoolConfig
from actors.pool.reward_pool import RewardPool
from actors.sampling import SamplerGroup, SamplerWorker, sampler_spec
from rewards import RewardConfig, UserRewardSpec
from tests.actors.sampling.stale_sampler import StaleWorker
from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, Pair
from trainer.engine import Trainer
from trainer.policy import CharTokenizer, PromptFormat
from trainer.rollouts_apart import WeightsMismatch
from trainer.sampling.sampler_seam import StepRequest

TOKENIZER = CharTokenizer(CHESS_ALPHABET)
MOVES = ["e4", "d4", "c4", "Nf3", "g3", "b3", "e3", "d3"]
STEPS = [[Pair(m, "e4 e5") for m in MOVES[i:] + MOVES[:i]][:4] for i in range(4)]
REWARD = RewardConfig(user=[UserRewardSpec(fn="user_rewards:length_bonus")])


def _cfg(placement: str, num: int = 1) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "seed": 0,
            "sampling": {
                "group_size": 4, "max_new_tokens": 8, "prompts_per_microbatch": 2, "placement": placement,
                "actors": {"num": num, "cpus_per_actor": 0.5},
            },
            "grpo": {"prompts_per_step": 4, "steps": len(STEPS)},
            "optim": {"lr": 1e-2},
            "precision": {"dtype": "fp32"},
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def pool(ray_cluster):
    cfg = PoolConfig(name_prefix=f"test-{uuid.uuid4().hex[:6]}", num_workers=1, cpus_per_worker=1)
    with RewardPool.create(REWARD, cfg, run_id="test") as pool:
        yield pool


def _group(trainer: Trainer, pool: RewardPool, worker_class=SamplerWorker) -> SamplerGroup:
    spec = sampler_spec(
        trainer, alphabet=CHESS_ALPHABET, prompt_format=PromptFormat(), stop=(), reward_token_ids=False,
        pool=pool.cfg, run_id="test",
    )  # fmt: skip
    return SamplerGroup.create(
        spec, trainer.cfg.sampling.actors, run_id=uuid.uuid4().hex[:6], worker_class=worker_class
    )


def _apart(pool: RewardPool, num: int = 1, worker_class=SamplerWorker) -> tuple[Trainer, SamplerGroup]:
    trainer = Trainer(_cfg("actors", num), TOKENIZER)
    trainer.sampler.threads = 1  # as the actors decode (one torch thread each)
    group = _group(trainer, pool, worker_class)
    trainer.sample_apart(group).plan(lambda t: STEPS[t], len(STEPS))
    return trainer, group


def test_actors_at_staleness_0_train_as_the_trainers_own_sampler(pool):
    ours = Trainer(_cfg("trainer"), TOKENIZER)
    ours.sampler.threads = 1
    theirs, group = _apart(pool, num=2)
    try:
        mine = [ours.grpo_step(STEPS[t], pool) for t in range(2)]
        other = [theirs.grpo_step(STEPS[t], pool) for t in range(2)]
    finally:
        group.shutdown()
    for a, b in zip(mine, other, strict=True):
        assert _results(a) == _results(b)
    assert [m["policy_version"] for m in other] == [0.0, 1.0]
    for a, b in zip(ours.model.state_dict().values(), theirs.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_sampler_actor_that_kept_older_weights_is_caught_by_the_digest(pool):
    trainer, group = _apart(pool, worker_class=StaleWorker)
    try:
        trainer.grpo_step(STEPS[0], pool)
        with pytest.raises(WeightsMismatch, match=r"^sampler weights mismatch at GRPO step 2: "):
            trainer.grpo_step(STEPS[1], pool)
    finally:
        group.shutdown()


def test_a_sampler_actor_killed_mid_step_is_replaced_and_the_step_is_the_same(pool):
    trainer = Trainer(_cfg("actors", num=2), TOKENIZER)
    weights = trainer.published_weights()
    request = StepRequest(0, 0, [Pair(m, "e4 e5") for m in MOVES], 0)
    steady, killed = _group(trainer, pool), _group(trainer, pool)
    try:
        for group in (steady, killed):
            group.publish(0, weights)
            group.request(request)
        os.kill(killed.actor_pids()[1], signal.SIGKILL)  # the second half of the step's prompts
        expected, got = steady.receive(0), killed.receive(0)
        assert killed.replacements == 1 and steady.replacements == 0
        assert killed.actor_pids()[1] != steady.actor_pids()[1]
    finally:
        steady.shutdown()
        killed.shutdown()
    assert got.digest == expected.digest == group_digest(weights)
    for a, b in zip(expected.rollouts, got.rollouts, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a[:5], b[:5], strict=True))
    assert got.rewards.values == expected.rewards.values and got.rewards.statuses == expected.rewards.statuses
    assert len(got.rewards.values) == len(MOVES) * 4


def _results(record: dict) -> dict:
    """A step record without the figures that time the machine."""
    return {k: v for k, v in record.items() if not k.endswith(("_s", "_per_s"))}


def group_digest(weights):
    from trainer.sampling.weights_digest import weights_digest

    return weights_digest(weights)
