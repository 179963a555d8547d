"""The shared-prefix forward gives the plain forward's logits and gradients, and steps aside when it must."""

import pytest
import torch

from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, Pair
from trainer.engine import Trainer
from trainer.grpo.minibatch import select_rows
from trainer.grpo.reward_source import InlineRewards
from trainer.model_config import BuiltinModelConfig
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.sampling.logprobs import completion_logprobs
from trainer.sampling.sampler import lay_out

B, K, P, L, V = 3, 4, 7, 9, 40


def _model(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(BuiltinModelConfig(size="tiny", block_size=64, **kw), V)


def _rows():
    """Left-padded prompts of three lengths, each repeated for K rows; two rows end early."""
    g = torch.Generator().manual_seed(1)
    prompt_mask = torch.ones(B, P, dtype=torch.bool)
    prompt_mask[0, :3], prompt_mask[2, :1] = False, False
    prompts = torch.randint(0, V, (B, P), generator=g)
    real = torch.ones(B * K, L, dtype=torch.bool)
    real[1, 5:], real[7, 2:] = False, False
    tokens = torch.randint(0, V, (B * K, L), generator=g)
    logps = -torch.rand(B * K, L, generator=g)
    return lay_out(prompts, prompt_mask, tokens, logps, real, real, K)


def _forward(model, rollout, keep, shared):
    kw = {"shared_prefix": (K, P)} if shared else {}
    return model(rollout.input_ids, rollout.position_ids, rollout.attn_mask, logits_to_keep=keep, **kw)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("keep", [0, 1, L, L + 1, L + 4])
def test_logits_equal_the_plain_forward(attention, keep):
    model, rollout = _model(), _rows()
    model.set_attention(attention)
    plain, shared = _forward(model, rollout, keep, False), _forward(model, rollout, keep, True)
    assert shared.shape == plain.shape == (B * K, keep or P + L, V)
    torch.testing.assert_close(shared, plain, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_gradients_equal_the_plain_forward(checkpointing):
    model, rollout = _model(gradient_checkpointing=checkpointing), _rows()
    grads = []
    for shared in (False, True):
        model.zero_grad()
        logits = _forward(model, rollout, L, shared)
        (logits.logsumexp(-1) * rollout.completion_mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for plain, shared in zip(*grads, strict=True):
        torch.testing.assert_close(shared, plain, atol=2e-5, rtol=1e-4)


def test_bf16_autocast_stays_close():
    model, rollout = _model(), _rows()
    model.set_attention("eager")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain, shared = _forward(model, rollout, L, False), _forward(model, rollout, L, True)
    assert shared.dtype == torch.float32
    torch.testing.assert_close(shared, plain, atol=0.05, rtol=0.05)


def test_active_dropout_takes_the_plain_forward():
    """Shared prompt columns would share one dropout draw across the group: not taken then."""
    model, rollout = _model(dropout=0.3), _rows()
    model.train()
    outs = []
    for shared in (False, True):
        torch.manual_seed(5)
        outs.append(_forward(model, rollout, L, shared))
    torch.testing.assert_close(outs[1], outs[0], atol=0.0, rtol=0.0)


def test_rows_that_do_not_form_groups_are_refused():
    model, rollout = _model(), _rows()
    ids, pos, mask = rollout.input_ids[:-1], rollout.position_ids[:-1], rollout.attn_mask[:-1]
    with pytest.raises(ValueError, match="do not form groups of 4"):
        model(ids, pos, mask, shared_prefix=(K, P))
    with pytest.raises(ValueError, match="prompt length"):
        model(rollout.input_ids[:, :P], shared_prefix=(K, P))


def test_completion_logprobs_agree_and_a_row_selection_is_not_shared():
    model, rollout = _model(), _rows()
    plain, _ = completion_logprobs(model, rollout, 0.7)
    shared, _ = completion_logprobs(model, rollout, 0.7, shared_prefix=True)
    torch.testing.assert_close(shared, plain, atol=2e-5, rtol=1e-5)
    subset = select_rows(rollout, torch.tensor([0, 5, 6]))
    assert subset.group_size == 1  # its rows are no longer whole groups
    picked, _ = completion_logprobs(model, subset, 0.7, shared_prefix=True)
    torch.testing.assert_close(picked, plain[[0, 5, 6]], atol=2e-5, rtol=1e-5)


def test_a_grpo_step_is_the_same_with_and_without_sharing():
    tokenizer = CharTokenizer(CHESS_ALPHABET)
    pairs = [Pair(p, t) for p, t in [("e4", "ab"), ("d4 d5", "cd"), ("c4", "ef"), ("Nf3 Nc6 g3", "gh")]]

    def reward(completions, targets):
        return [
            sum(a == b for a, b in zip(c, t, strict=False)) / len(t)
            for c, t in zip(completions, targets, strict=True)
        ]

    figures, weights = [], []
    for shared in (False, True):
        cfg = TrainerConfig.model_validate(
            {
                "seed": 0,
                "model": {"shared_prefix": shared},
                "sampling": {"group_size": 4, "max_new_tokens": 6, "prompts_per_microbatch": 2},
                "grpo": {"prompts_per_step": 4, "beta": 0.04},
                "optim": {"lr": 1e-2},
                "precision": {"dtype": "fp32"},
            }
        )
        trainer = Trainer(cfg, tokenizer)
        assert trainer.policy.shared_prefix is shared
        figures.append(trainer.grpo_step(pairs, InlineRewards(reward)))
        weights.append(torch.cat([p.detach().flatten() for p in trainer.model.parameters()]))
    for key in ("loss", "kl", "grad_norm", "reward_mean", "entropy"):
        assert figures[1][key] == pytest.approx(figures[0][key], rel=1e-4, abs=1e-6), key
    # Adam's first step is about lr * sign(grad): a weight whose gradient is float noise may move by
    # a little either way, one with a real gradient by the same 1e-2 in both runs.
    torch.testing.assert_close(weights[1], weights[0], atol=1e-3, rtol=0.0)
