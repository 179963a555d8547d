"""The transformers policy's shared-prefix forward (through the model's KV cache) gives the plain
forward's logits and gradients, steps aside where it must, and a GRPO step is the same with it."""

import warnings

import pytest
import torch

pytest.importorskip("transformers")

from trainer.config import TrainerConfig  # noqa: E402
from trainer.data.pairs import Pair  # noqa: E402
from trainer.engine import Trainer  # noqa: E402
from trainer.grpo.reward_source import InlineRewards  # noqa: E402
from trainer.model_config import HFModelConfig  # noqa: E402
from trainer.policy.hf import HFPolicy  # noqa: E402
from trainer.policy.hf_tiny import write_tiny_model  # noqa: E402
from trainer.sampling.sampler import lay_out  # noqa: E402

B, K, P, L = 3, 4, 7, 9


@pytest.fixture(scope="module", params=[("llama", "sdpa"), ("gpt2", "eager")])
def policy(request, tmp_path_factory) -> HFPolicy:
    arch, attention = request.param
    path = write_tiny_model(tmp_path_factory.mktemp(arch), arch, positions=64)
    return HFPolicy.load(HFModelConfig(source="hf", path=str(path), attn_implementation=attention))


def _rows(vocab: int):
    """Left-padded prompts repeated for K rows each; two rows end early."""
    g = torch.Generator().manual_seed(1)
    prompt_mask = torch.ones(B, P, dtype=torch.bool)
    prompt_mask[0, :3] = False
    real = torch.ones(B * K, L, dtype=torch.bool)
    real[1, 5:], real[7, 2:] = False, False
    tokens = torch.randint(3, vocab, (B * K, L), generator=g)
    prompts = torch.randint(3, vocab, (B, P), generator=g)
    return lay_out(prompts, prompt_mask, tokens, -torch.rand(B * K, L, generator=g), real, real, K)


def _logits(policy, rollout, keep, shared):
    kw = {"shared_prefix": (K, P)} if shared else {}
    ids, pos, mask = rollout.input_ids, rollout.position_ids, rollout.attn_mask
    return policy.module(ids, pos, mask, logits_to_keep=keep, **kw)


@pytest.mark.parametrize("keep", [0, 1, L, L + 2])
def test_logits_equal_the_plain_forward_on_real_tokens(policy, keep):
    rollout = _rows(policy.vocab_size)
    policy.module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no deprecated cache argument
        shared = _logits(policy, rollout, keep, True)
    plain = _logits(policy, rollout, keep, False)
    real = rollout.attn_mask[:, -plain.shape[1] :]  # pads' outputs are never read
    assert shared.shape == plain.shape
    torch.testing.assert_close(shared[real], plain[real], atol=2e-5, rtol=1e-5)


def test_gradients_equal_the_plain_forward(policy):
    rollout = _rows(policy.vocab_size)
    module = policy.module.train()
    for m in module.modules():  # the update runs without dropout (`trainer.grpo.dropout`)
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    grads = []
    for shared in (False, True):
        module.zero_grad()
        logits = _logits(policy, rollout, L, shared)
        (logits.logsumexp(-1) * rollout.completion_mask).sum().backward()
        grads.append([p.grad.clone() for p in module.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1])
    for plain, shared in zip(*grads, strict=True):
        torch.testing.assert_close(shared, plain, atol=1e-4, rtol=1e-3)


def test_gradient_checkpointing_takes_the_plain_forward(tmp_path):
    path = write_tiny_model(tmp_path, "llama", positions=64)
    policy = HFPolicy.load(HFModelConfig(source="hf", path=str(path), gradient_checkpointing=True))
    rollout = _rows(policy.vocab_size)
    module = policy.module.train()
    assert not module._can_share()  # transformers turns the cache off under checkpointing
    torch.testing.assert_close(_logits(policy, rollout, L, True), _logits(policy, rollout, L, False))


def test_a_grpo_step_is_the_same_with_and_without_sharing(tmp_path):
    path = write_tiny_model(tmp_path, "gpt2", positions=64)
    pairs = [Pair(p, t) for p, t in [("e4", "ab"), ("d4 d5", "cd"), ("c4", "ef"), ("Nf3 Nc6", "gh")]]

    def reward(completions, targets):
        return [float(len(c) % 3) for c in completions]

    figures = []
    for shared in (False, True):
        cfg = TrainerConfig.model_validate(
            {
                "seed": 0,
                "model": {"source": "hf", "path": str(path), "shared_prefix": shared},
                "sampling": {"group_size": 4, "max_new_tokens": 6, "prompts_per_microbatch": 2},
                "grpo": {"prompts_per_step": 4, "beta": 0.04, "zero_var_groups": "keep"},
                "precision": {"dtype": "fp32"},
            }
        )
        trainer = Trainer(cfg)
        assert trainer.policy.shared_prefix is shared
        figures.append(trainer.grpo_step(pairs, InlineRewards(reward)))
    for key in ("loss", "kl", "grad_norm", "reward_mean", "entropy"):
        assert figures[1][key] == pytest.approx(figures[0][key], rel=1e-4, abs=1e-6), key
