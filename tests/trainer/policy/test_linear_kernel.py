"""fp32 linear layers through oneDNN (`trainer.policy.linear_kernel`): the same products and
gradients as torch's, the fallbacks, the built-in GPT with either kernel, and `auto`'s rule."""

import pytest
import torch
import torch.nn.functional as F

from trainer.model_config import BuiltinModelConfig
from trainer.policy import linear_kernel
from trainer.policy.gpt import GPT
from trainer.policy.linear_kernel import KernelLinear, onednn_linear, resolve_linear_kernel

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not linear_kernel.onednn_available(), reason="this torch has no oneDNN"),
]

ROWS = 300  # at least ONEDNN_MIN_ROWS: oneDNN computes these


def _close(a, b, tol=2e-5):
    assert torch.allclose(a, b, rtol=tol, atol=tol), (a - b).abs().max().item()


@pytest.mark.parametrize("shape", [(ROWS, 64), (3, 100, 64)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("gelu", [False, True])
@pytest.mark.parametrize("out", [96, 48])  # wider and narrower than the input: both backward layouts
def test_forward_and_gradients_equal_torchs(shape, bias, gelu, out):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen, requires_grad=True)
    w = torch.randn(out, 64, generator=gen, requires_grad=True)
    b = torch.randn(out, generator=gen, requires_grad=True) if bias else None
    grad = torch.randn(*shape[:-1], out, generator=gen)

    def run(fn):
        y = fn()
        y.backward(grad)
        grads = [x.grad.clone(), w.grad.clone()] + ([b.grad.clone()] if bias else [])
        for t in (x, w, b):
            if t is not None:
                t.grad = None
        return y.detach(), grads

    y, grads = run(lambda: onednn_linear(x, w, b, gelu=gelu))
    want, want_grads = run(lambda: (F.gelu if gelu else (lambda t: t))(F.linear(x, w, b)))
    assert y.shape == want.shape
    _close(y, want)
    for got, ref in zip(grads, want_grads, strict=True):
        assert got.shape == ref.shape and got.is_contiguous()
        _close(got, ref, 1e-4)
    with torch.no_grad():  # the fused GELU
        _close(onednn_linear(x, w, b, gelu=gelu), want)


def test_where_it_does_not_apply_torch_computes_it():
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(32, 16, generator=gen)
    small = torch.randn(4, 16, generator=gen)  # a decoding step's few rows
    assert torch.equal(onednn_linear(small, w), F.linear(small, w))
    x = torch.randn(ROWS, 16, generator=gen)
    assert torch.equal(onednn_linear(x.double(), w.double()), F.linear(x.double(), w.double()))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert onednn_linear(x, w).dtype == torch.bfloat16  # autocast's product, not an fp32 one


def test_the_gpt_computes_alike_with_either_kernel_and_keeps_its_state_dict():
    cfg = BuiltinModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=64)
    torch.manual_seed(0)
    model = GPT(cfg, vocab_size=20)
    assert isinstance(model.transformer.h[0].mlp.c_fc, KernelLinear)
    idx = torch.randint(0, 20, (8, 48), generator=torch.Generator().manual_seed(2))
    keys = set(model.state_dict())

    def loss_and_grads(kernel):
        model.set_linear_kernel(kernel)
        model.zero_grad()
        loss = model(idx).logsumexp(-1).mean()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    loss, grads = loss_and_grads("onednn")
    want, want_grads = loss_and_grads("torch")
    _close(loss, want)
    for name, grad in grads.items():
        _close(grad, want_grads[name], 1e-4)
    assert set(model.state_dict()) == keys
    with pytest.raises(ValueError, match="'torch' or 'onednn'"):
        model.set_linear_kernel("mkl")


def test_auto_takes_onednn_on_an_amd_cpu_with_avx512_only(monkeypatch):
    def machine(vendor, flags):
        monkeypatch.setattr(linear_kernel, "cpu_vendor", lambda: vendor)
        monkeypatch.setattr(linear_kernel, "cpu_flags", lambda: frozenset(flags))

    machine("AuthenticAMD", {"avx2", "avx512f"})
    assert resolve_linear_kernel("auto", "cpu")[0] == "onednn"
    assert resolve_linear_kernel("auto", "cuda")[0] == "torch"
    assert resolve_linear_kernel("torch", "cpu") == ("torch", "set in the config")
    machine("AuthenticAMD", {"avx2"})
    assert resolve_linear_kernel("auto", "cpu")[0] == "torch"
    machine("GenuineIntel", {"avx2", "avx512f"})
    kernel, why = resolve_linear_kernel("auto", "cpu")
    assert kernel == "torch" and "MKL" in why
    with pytest.raises(ValueError, match="must be one of"):
        resolve_linear_kernel("mkl", "cpu")
    monkeypatch.setattr(linear_kernel, "onednn_available", lambda: False)
    with pytest.raises(ValueError, match="no oneDNN"):
        resolve_linear_kernel("onednn", "cpu")
    machine("AuthenticAMD", {"avx512f"})
    assert resolve_linear_kernel("auto", "cpu")[0] == "torch"


def test_a_decoding_step_takes_onednn_once_checked_and_decodes_as_torch_does():
    cfg = BuiltinModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=64)
    torch.manual_seed(0)
    model = GPT(cfg, vocab_size=20).eval()
    layer = model.transformer.h[0].attn.c_attn
    x = torch.randn(4, 32)  # a step's few rows: oneDNN all the same
    model.set_linear_kernel("onednn")
    with torch.inference_mode():
        assert linear_kernel.step_linear(layer, x) is linear_kernel._onednn_step
        _close(linear_kernel._onednn_step(layer, x, True), F.gelu(F.linear(x, layer.weight, layer.bias)))
        assert linear_kernel.step_linear(layer, x.double()) is linear_kernel._torch_step
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert linear_kernel.step_linear(layer, x) is linear_kernel._torch_step
    assert linear_kernel.step_linear(layer, x) is linear_kernel._torch_step  # autograd on: torch's
    model.set_linear_kernel("torch")
    with torch.inference_mode():
        assert linear_kernel.step_linear(layer, x) is linear_kernel._torch_step

    def decoded(kernel):  # greedy tokens and logits of 12 steps after a 5-token prompt
        from trainer.policy.kv_cache import KVCache

        model.set_linear_kernel(kernel)
        cache = KVCache.for_model(cfg, 6, 20, device="cpu", dtype=torch.float32)
        with torch.inference_mode():
            logits = model(torch.arange(30).view(6, 5) % 20, kv_cache=cache)[:, -1]
            out = []
            for t in range(12):
                tokens = logits.argmax(-1)
                logits = model.decode_one(tokens, torch.full((6,), 5 + t), cache)
                out.append(logits)
        return torch.stack(out)

    _close(decoded("onednn"), decoded("torch"), 1e-4)
