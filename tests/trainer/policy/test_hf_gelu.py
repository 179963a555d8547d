"""gelu_new with fewer temporaries: transformers' values bit for bit, its gradient within rounding."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.activations import NewGELUActivation  # noqa: E402

from trainer.policy.hf_gelu import GeluNew, gelu_new, replace_gelu_new  # noqa: E402


def _inputs(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 7, 96, generator=g) * 4  # tails where tanh saturates, and both signs
    x[0, 0, :6] = torch.tensor([0.0, -0.0, 1e-20, -30.0, 30.0, 3.4e12])
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_values_are_transformers_own_to_the_last_bit(dtype):
    x = _inputs(dtype)
    want = NewGELUActivation()(x)
    assert torch.equal(gelu_new(x), want)
    y = x.clone().requires_grad_()
    assert torch.equal(gelu_new(y).detach(), want)  # the autograd path too


def test_the_input_is_left_as_it_was():
    x = _inputs(torch.float32)
    before = x.clone()
    gelu_new(x)
    gelu_new(x.clone().requires_grad_()).sum().backward()
    assert torch.equal(x, before)


def test_the_gradient_is_the_derivative_within_rounding():
    x = _inputs(torch.float64)[:, :, :32].clone()
    x[0, 0, :6] = torch.tensor([0.0, -0.0, 1e-20, -30.0, 30.0, 3.0])
    grad = torch.randn_like(x)
    ours = x.clone().requires_grad_()
    gelu_new(ours).backward(grad)
    ref = x.clone().requires_grad_()
    NewGELUActivation()(ref).backward(grad)
    torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(gelu_new, (x[:2, :2, :8].clone().requires_grad_(),))


def test_a_gpt2_gets_it_in_every_block_and_gives_the_same_logits():
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=50, n_layer=3, n_embd=32, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=1
    )
    model = GPT2LMHeadModel(config).eval()  # no dropout
    ids = torch.randint(0, 50, (3, 20))
    want = model(ids).logits
    assert replace_gelu_new(model) == 3
    assert sum(isinstance(m, GeluNew) for m in model.modules()) == 3
    assert not any(type(m) is NewGELUActivation for m in model.modules())
    assert torch.equal(model(ids).logits, want)
    assert replace_gelu_new(model) == 0  # nothing left to replace
