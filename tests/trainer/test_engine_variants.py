"""GRPO variants through the Trainer: every option trains a step; dropout, overlong and KL in the reward."""

import math

import pytest
import torch

from trainer.config import PrecisionConfig, TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, Pair
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards
from trainer.policy.char_tokenizer import CharTokenizer

TOKENIZER = CharTokenizer(CHESS_ALPHABET)
PAIRS = [Pair(p, t) for p, t in [("e4", "ab"), ("d4", "cd"), ("c4", "ef"), ("Nf3", "gh")]]


def cfg(model=None, sampling=None, **grpo) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "seed": 0,
            "model": model or {},
            "sampling": {
                "group_size": 4,
                "max_new_tokens": 6,
                "prompts_per_microbatch": 2,
                **(sampling or {}),
            },
            "grpo": {"prompts_per_step": 4, **grpo},
            "optim": {"lr": 1e-2},
        }
    )


def char_match(completions, targets):
    return [
        sum(a == b for a, b in zip(c, t, strict=False)) / len(t)
        for c, t in zip(completions, targets, strict=True)
    ]


@pytest.mark.parametrize(
    "variant",
    [
        {"epochs": 2, "minibatches": 4},
        {"kl_estimator": "k1"},
        {"kl_estimator": "k2", "kl_placement": "reward"},
        {"ratio_level": "sequence", "loss_agg": "sequence"},
        {"dual_clip": 3.0, "passes": 2},
        {"tis_cap": 2.0},
        {"overlong": "mask"},
        {"overlong": "penalty", "overlong_buffer": 3},
    ],
)
def test_every_variant_trains(variant):
    trainer = Trainer(cfg(**variant), TOKENIZER)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    m = trainer.grpo_step(PAIRS, InlineRewards(char_match))
    assert all(math.isfinite(m[k]) for k in ("loss", "kl", "clip_frac", "grad_norm", "reward_mean"))
    assert m["skipped"] == 0 and m["empty_update"] == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))
    expected = cfg(**variant).grpo
    assert trainer.optimizer("grpo").steps == expected.epochs * expected.minibatches


def test_several_minibatches_clip_within_one_step():
    trainer = Trainer(cfg(epochs=2, minibatches=4, beta=0.0), TOKENIZER)
    m = trainer.grpo_step(PAIRS, InlineRewards(char_match))
    assert m["clip_frac"] > 0  # later mini-batches see a policy that moved: the ratio leaves 1


def test_dropout_does_not_reach_the_update():
    """The sampler decodes without dropout; so must the update's forward, or the ratio starts away from 1.
    (Both in fp32: where a run decodes in fp32 and trains in bf16 the gap is bf16's rounding.)"""
    fp32 = cfg(model={"dropout": 0.3}).model_copy(update={"precision": PrecisionConfig(dtype="fp32")})
    trainer = Trainer(fp32, TOKENIZER)
    m = trainer.grpo_step(PAIRS, InlineRewards(char_match))
    assert m["sampler_logprob_gap"] < 1e-5 and m["clip_frac"] == 0.0
    assert all(d.p == 0.3 for d in trainer.model.modules() if isinstance(d, torch.nn.Dropout))  # restored


def test_overlong_mask_and_penalty():
    never_ends = InlineRewards(lambda c, t: [float(len(c)) / 6 + 0.01 * i for i, _ in enumerate(c)])
    trainer = Trainer(cfg(sampling={"max_new_tokens": 2}, overlong="mask", beta=0.0), TOKENIZER)
    m = trainer.grpo_step(PAIRS, never_ends)
    assert m["truncated_frac"] > 0.5
    penalised = Trainer(
        cfg(sampling={"max_new_tokens": 2}, overlong="penalty", overlong_buffer=2, beta=0.0), TOKENIZER
    )
    p = penalised.grpo_step(PAIRS, never_ends)
    plain = Trainer(cfg(sampling={"max_new_tokens": 2}, beta=0.0), TOKENIZER).grpo_step(PAIRS, never_ends)
    assert p["reward_mean"] == pytest.approx(plain["reward_mean"])  # the task's reward is reported unshaped
    assert p["truncated_frac"] == plain["truncated_frac"] > 0


def test_kl_in_the_reward_moves_the_rewards_not_the_loss():
    trainer = Trainer(cfg(beta=0.5, kl_placement="reward", passes=2), TOKENIZER)
    trainer.grpo_step(PAIRS, InlineRewards(char_match))
    m = trainer.grpo_step(PAIRS, InlineRewards(char_match))
    assert m["kl_reward_penalty"] > 0 and m["kl"] == 0.0  # no KL term in the loss


def test_config_names_the_key():
    with pytest.raises(ValueError, match="grpo.minibatches"):
        cfg(minibatches=17)
    with pytest.raises(ValueError, match="overlong_buffer"):
        cfg(overlong="penalty", overlong_buffer=7)
    with pytest.raises(ValueError, match="needs beta > 0"):
        cfg(kl_placement="reward", beta=0.0)
    with pytest.raises(ValueError, match="alias"):
        cfg(passes=2, epochs=3)


def test_a_skipped_reward_drops_its_group_and_is_counted_never_zero():
    from trainer.grpo.reward_source import Rewards

    def skip_pair_1(completions, targets):
        values = char_match(completions, targets)
        skipped = [t == "cd" for t in targets]
        statuses = ["skipped" if s else "ok" for s in skipped]
        return Rewards(values=values, usable=[not s for s in skipped], statuses=statuses)

    for on_unusable in ("drop_group", "fail"):  # a skip is never a failure
        trainer = Trainer(cfg(zero_var_groups="keep", on_unusable_reward=on_unusable), TOKENIZER)
        m = trainer.grpo_step(PAIRS, InlineRewards(skip_pair_1))
        assert m["skipped_groups"] == 1 and m["dropped_groups"] == 1 and m["empty_update"] == 0


def test_dynamic_sampling_refills_dropped_groups_within_its_bound():
    # only prompts whose target starts with "g" give rewards that vary: the others are dropped
    def only_g(completions, targets):
        return [
            char_match([c], [t])[0] if t.startswith("g") else 0.0
            for c, t in zip(completions, targets, strict=True)
        ]

    extra = [[Pair("e4 e5", "gh"), Pair("d4", "gd"), Pair("c4", "ef"), Pair("g3", "gg")]] * 5
    asked = []

    def refill(t):
        asked.append(t)
        return extra[t]

    trainer = Trainer(cfg(dynamic_sampling_tries=3, beta=0.0), TOKENIZER)
    m = trainer.grpo_step(PAIRS, InlineRewards(only_g), refill=refill)
    assert m["refill_rounds"] == len(asked) >= 1 and m["refill_prompts"] == 4 * len(asked)
    assert m["completions"] == 16 * (1 + len(asked))
    kept = m["completions"] / 4 - m["dropped_groups"]
    assert kept >= 4 or len(asked) == 3  # enough groups with a signal, or the bound reached
    off = Trainer(cfg(beta=0.0), TOKENIZER).grpo_step(PAIRS, InlineRewards(only_g), refill=refill)
    assert off["refill_rounds"] == 0 and off["completions"] == 16
