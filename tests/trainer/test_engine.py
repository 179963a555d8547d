"""The single-process Trainer: GRPO steps end to end, the guard, dropped groups, evaluation."""

import math

import pytest
import torch

from tests.trainer.tiny_setup import CHESS_TOKENIZER, PAIRS, char_match, small_cfg
from trainer.config import TrainerConfig
from trainer.data.chess_games import Pair
from trainer.engine import Trainer
from trainer.grpo.reward_source import InlineRewards, Rewards
from trainer.grpo.selection import RewardFailure
from trainer.optim import NonFiniteStepsError

EXPECTED_KEYS = {
    "reward_mean", "loss", "kl", "entropy", "clip_frac", "zero_var_frac", "dropped_groups", "skipped",
    "grad_norm", "lr", "sample_s", "reward_wait_s", "update_s", "step_time_s", "completions", "tokens",
}  # fmt: skip


def test_grpo_step_reports_every_metric():
    trainer = Trainer(small_cfg(), CHESS_TOKENIZER)
    m = trainer.grpo_step(PAIRS, InlineRewards(char_match))
    assert EXPECTED_KEYS <= set(m)
    assert m["completions"] == 16 and 16 <= m["tokens"] <= 16 * 6
    assert all(math.isfinite(v) for k, v in m.items() if k != "entropy")
    assert m["kl"] == pytest.approx(0.0, abs=1e-6)  # the reference is the policy before this step
    assert m["clip_frac"] == 0.0  # one pass: ratio is exactly 1
    assert trainer.grpo_steps == 1


def test_no_reference_model_when_beta_is_zero():
    trainer = Trainer(small_cfg(beta=0.0), CHESS_TOKENIZER)
    trainer.grpo_step(PAIRS, InlineRewards(char_match))
    assert trainer.ref_model is None
    with_ref = Trainer(small_cfg(beta=0.1), CHESS_TOKENIZER)
    with_ref.grpo_step(PAIRS, InlineRewards(char_match))
    assert with_ref.ref_model is not None and not any(
        p.requires_grad for p in with_ref.ref_model.parameters()
    )


def test_kl_grows_from_zero_and_several_passes_clip():
    trainer = Trainer(small_cfg(beta=0.1, passes=3), CHESS_TOKENIZER)
    first = trainer.grpo_step(PAIRS, InlineRewards(char_match))
    second = trainer.grpo_step(PAIRS, InlineRewards(char_match))
    assert second["kl"] > 0  # the policy moved away from the reference in step 1
    assert first["clip_frac"] >= 0 and trainer.optimizer("grpo").steps == 6


def _params(trainer):
    return [p.detach().clone() for p in trainer.model.parameters()]


def test_nonfinite_rewards_skip_the_update_then_stop_the_run():
    trainer = Trainer(small_cfg(optim={"max_consecutive_skips": 2}), CHESS_TOKENIZER)
    trainer.grpo_step(PAIRS, InlineRewards(char_match))  # a real step: moments exist
    opt = trainer.optimizer("grpo")
    before = _params(trainer)
    moments = {k: v.clone() for k, v in opt.optimizer.state[trainer.model.lm_head.weight].items()}
    nan_scorer = InlineRewards(lambda c, t: [float("nan") if i % 2 else 0.0 for i in range(len(c))])
    m = trainer.grpo_step(PAIRS, nan_scorer)
    assert m["skipped"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, _params(trainer), strict=True))
    after = opt.optimizer.state[trainer.model.lm_head.weight]
    assert all(torch.equal(moments[k], after[k]) for k in moments)
    with pytest.raises(NonFiniteStepsError, match="2 optimiser steps in a row"):
        trainer.grpo_step(PAIRS, nan_scorer)


def _rewards_with_unusable(completions, targets):
    values = char_match(completions, targets)
    usable = [t != "cd" for t in targets]  # the group of pair 1 timed out
    statuses = ["ok" if u else "timeout" for u in usable]
    return Rewards(values=values, usable=usable, statuses=statuses)


def test_unusable_reward_drops_its_group_or_fails():
    trainer = Trainer(small_cfg(zero_var_groups="keep"), CHESS_TOKENIZER)
    m = trainer.grpo_step(PAIRS, InlineRewards(_rewards_with_unusable))
    assert m["dropped_groups"] == 1 and m["unusable_groups"] == 1
    failing = Trainer(small_cfg(on_unusable_reward="fail"), CHESS_TOKENIZER)
    with pytest.raises(RewardFailure, match="1 of 4 groups"):
        failing.grpo_step(PAIRS, InlineRewards(_rewards_with_unusable))


def test_all_groups_dropped_makes_no_optimiser_step():
    trainer = Trainer(small_cfg(beta=0.0), CHESS_TOKENIZER)
    before = _params(trainer)
    m = trainer.grpo_step(PAIRS, InlineRewards(lambda c, t: [0.5] * len(c)))  # zero variance everywhere
    assert m["zero_var_frac"] == 1.0 and m["dropped_groups"] == 4 and m["empty_update"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, _params(trainer), strict=True))
    assert trainer.optimizer("grpo").steps == 0


def test_kl_still_regularises_zero_variance_groups():
    trainer = Trainer(small_cfg(beta=0.5, passes=2, optim={"lr": 1e-2}), CHESS_TOKENIZER)
    trainer.grpo_step(PAIRS, InlineRewards(char_match))  # the policy moves away from the reference
    before = _params(trainer)
    m = trainer.grpo_step(PAIRS, InlineRewards(lambda c, t: [0.5] * len(c)))  # zero variance everywhere
    assert m["zero_var_frac"] == 1.0 and m["dropped_groups"] == 4 and m["empty_update"] == 0.0
    assert m["kl"] > 0 and m["grad_norm"] > 0  # the KL term alone moved the policy
    assert any(not torch.equal(a, b) for a, b in zip(before, _params(trainer), strict=True))
    assert trainer.optimizer("grpo").steps == 4


@pytest.mark.parametrize("agg", ["token", "sequence", "constant"])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_every_aggregation_and_scale_trains(agg, scale):
    trainer = Trainer(small_cfg(loss_agg=agg, scale=scale), CHESS_TOKENIZER)
    before = _params(trainer)
    m = trainer.grpo_step(PAIRS, InlineRewards(char_match))
    assert math.isfinite(m["loss"]) and m["skipped"] == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, _params(trainer), strict=True))


def starts_with_e(completions, targets):
    return [1.0 if c.startswith("e") else 0.0 for c in completions]


def test_grpo_raises_mean_reward_of_a_tiny_policy():
    cfg = TrainerConfig.model_validate(
        {
            "seed": 0,
            "sampling": {"group_size": 8, "max_new_tokens": 2, "prompts_per_microbatch": 8},
            "grpo": {"beta": 0.0, "prompts_per_step": 8},
            "optim": {"lr": 3e-3},
        }
    )
    trainer = Trainer(cfg, CHESS_TOKENIZER)
    pairs = [Pair(p, "e") for p in ["e4", "d4", "c4", "Nf3", "g3", "b3", "f4", "a3"]]
    rewards = [trainer.grpo_step(pairs, InlineRewards(starts_with_e))["reward_mean"] for _ in range(20)]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-5:]) / 5
    assert first < 0.3  # about 1 in vocab_size completions starts with "e" at first
    assert last > first + 0.4, rewards


def test_evaluate_scores_greedy_completions():
    trainer = Trainer(small_cfg(), CHESS_TOKENIZER)
    out = trainer.evaluator.evaluate(PAIRS, char_match, n_samples=2)
    assert set(out) >= {"exact_match", "valid_rate", "reward_mean", "samples"}
    assert out["valid_rate"] is None and out["count"] == 4 and len(out["samples"]) == 2
    again = trainer.evaluator.evaluate(PAIRS, _rewards_with_unusable, n_samples=1)
    assert again["valid_rate"] == 0.75
    assert out["samples"][0]["completion"] == again["samples"][0]["completion"]  # greedy: deterministic


def test_shard_must_divide():
    trainer = Trainer(small_cfg(), CHESS_TOKENIZER)
    assert trainer.local_share(PAIRS) == PAIRS


@pytest.mark.slow
def test_cpu_compiled_training_and_decoding_step_like_eager():
    """model.compile and sampling.compile on CPU (inductor C++): the same samples, loss and weights."""
    from trainer.compile import compile_unsupported_reason

    if compile_unsupported_reason("cpu") is not None:
        pytest.skip(compile_unsupported_reason("cpu"))
    base = small_cfg().model_dump(mode="json")
    compiled_cfg = {**base, "model": {**base["model"], "compile": True}}
    compiled_cfg["sampling"] = {**base["sampling"], "compile": True}
    trainers = [
        Trainer(small_cfg(), CHESS_TOKENIZER),
        Trainer(TrainerConfig.model_validate(compiled_cfg), CHESS_TOKENIZER),
    ]
    metrics = [[t.grpo_step(PAIRS, InlineRewards(char_match)) for _ in range(2)] for t in trainers]
    for eager, compiled in zip(*metrics, strict=True):
        assert compiled["tokens"] == eager["tokens"] and compiled["reward_mean"] == eager["reward_mean"]
        assert compiled["loss"] == pytest.approx(eager["loss"], rel=1e-4, abs=1e-6)
    # Adam's first steps move a weight by about lr whatever its gradient's size, so rounding in a
    # near-zero gradient can move one weight by a few 1e-5 (lr is 1e-3): allow a tenth of lr.
    for a, b in zip(*(_params(t) for t in trainers), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
