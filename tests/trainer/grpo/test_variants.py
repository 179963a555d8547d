"""Each loss variant against a formula written from its public definition, on hand-made tensors.

KL estimators: Schulman, "Approximating KL divergence" (k1, k2, k3), with verl's clamps (`kl_penalty`).
GSPO: Zheng et al. 2025, s_i = (pi(y_i) / pi_old(y_i))^(1/|y_i|), J = mean_i min(s_i A_i, clip(s_i) A_i).
Dual-clip: Ye et al. 2020, for A < 0 the loss is min(max(-rA, -clip(r)A), -cA).
Truncated IS: Yao et al. 2025, the surrogate times min(pi_trainer_old / pi_sampler, C).
DAPO overlong: R = 0 for |y| <= Lmax - Lc, ((Lmax - Lc) - |y|) / Lc up to Lmax.
"""

import math

import pytest
import torch

from trainer.grpo.kl import kl_estimate, sequence_kl
from trainer.grpo.loss import aggregate_loss, loss_denominator, policy_loss_terms
from trainer.grpo.shaping import overlong_penalty

torch.manual_seed(0)
DT = torch.float64


def _micro_batches():
    """Three micro-batches of different lengths, ragged masks, log-probs near each other."""
    out = []
    for n, length in ((4, 5), (4, 3), (2, 6)):
        old = -torch.rand(n, length, dtype=DT) * 2 - 0.1
        logp = (old + 0.3 * torch.randn(n, length, dtype=DT)).requires_grad_(True)
        ref = old + 0.2 * torch.randn(n, length, dtype=DT)
        lengths = torch.randint(1, length + 1, (n,))
        mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
        adv = torch.randn(n, dtype=DT)
        out.append((logp, old, ref, mask, adv))
    return out


def _ours(parts, agg, **kw):
    """Our loss over several micro-batches with a global denominator, and d loss / d logp."""
    rows = [torch.ones(m.shape[0]) for _, _, _, m, _ in parts]
    den = sum(loss_denominator(m, w, agg, 7) for (_, _, _, m, _), w in zip(parts, rows, strict=True))
    beta = kw.pop("beta", 0.0)
    total = 0.0
    for (logp, old, ref, mask, adv), w in zip(parts, rows, strict=True):
        terms = policy_loss_terms(logp, old, adv, mask, 0.2, 0.28, ref, beta, **kw)
        total = total + aggregate_loss(terms.loss, mask, w, agg, den)
    grads = torch.autograd.grad(total, [p[0] for p in parts])
    return total, grads


def _close(a, b, rel=1e-6):
    assert torch.allclose(torch.as_tensor(a), torch.as_tensor(b), rtol=rel, atol=1e-12), (a, b)


@pytest.mark.parametrize("est", ["k1", "k2", "k3"])
def test_kl_estimators_and_their_gradients(est):
    parts = _micro_batches()
    loss, grads = _ours(parts, "token", beta=0.3, kl_estimator=est, dual_clip=None)
    # formula: mean over every unmasked token of the batch of -min(rA, clip(r)A) + beta * k(r)
    total, count = 0.0, 0
    for logp, old, ref, mask, adv in parts:
        r = torch.exp(logp - old)
        a = adv.unsqueeze(1)
        pg = -torch.minimum(r * a, torch.clamp(r, 0.8, 1.28) * a)
        lr = ref - logp  # log(ref / pi)
        kl = {"k1": -lr, "k2": 0.5 * lr**2, "k3": torch.exp(lr) - lr - 1}[est]
        total = total + ((pg + 0.3 * kl) * mask).sum()
        count += int(mask.sum())
    expected = total / count
    _close(loss, expected)
    for g, e in zip(grads, torch.autograd.grad(expected, [p[0] for p in parts]), strict=True):
        _close(g, e)


def test_kl_clamps_keep_a_huge_log_ratio_finite():
    logp = torch.tensor([[-100.0, -1.0]], dtype=DT, requires_grad=True)
    ref = torch.tensor([[0.0, -1.0]], dtype=DT)
    kl = kl_estimate(logp, ref, "k3")
    assert kl.tolist()[0] == [10.0, 0.0]  # exp(20) - 21 clamped to 10
    assert kl_estimate(logp, ref, "k1").tolist()[0] == [-20.0, 0.0]  # the log-ratio clamp: +-20
    assert kl_estimate(logp, ref, "k2").tolist()[0] == [200.0, 0.0]
    kl.sum().backward()
    assert torch.isfinite(logp.grad).all()
    mask = torch.tensor([[True, False]])
    assert sequence_kl(logp.detach(), ref, mask, "k1").tolist() == [-20.0]


def test_gspo_sequence_ratio_matches_its_definition():
    parts = _micro_batches()
    loss, grads = _ours(parts, "sequence", ratio_level="sequence")
    terms = []
    for logp, old, _, mask, adv in parts:
        s = torch.exp(((logp - old) * mask).sum(1) / mask.sum(1))  # (pi/pi_old)^(1/|y|)
        terms.append(-torch.minimum(s * adv, torch.clamp(s, 0.8, 1.28) * adv))
    expected = torch.cat(terms).mean()
    _close(loss, expected)
    for g, e in zip(grads, torch.autograd.grad(expected, [p[0] for p in parts]), strict=True):
        _close(g, e)


def test_dual_clip_bounds_negative_advantages():
    parts = _micro_batches()
    # large ratios so that some A < 0 tokens pass c = 1.5
    parts = [
        ((lp.detach() + 0.6 * torch.rand_like(lp)).requires_grad_(True), o, r, m, a)
        for lp, o, r, m, a in parts
    ]
    loss, grads = _ours(parts, "token", dual_clip=1.5)
    total, count, dual = 0.0, 0, 0
    for logp, old, _, mask, adv in parts:
        r = torch.exp(logp - old)
        a = adv.unsqueeze(1)
        pg = torch.maximum(-r * a, -torch.clamp(r, 0.8, 1.28) * a)
        bounded = torch.minimum(pg, -1.5 * a)
        dual += int(((a < 0) & (bounded < pg) & mask).sum())
        pg = torch.where(a < 0, bounded, pg)
        total = total + (pg * mask).sum()
        count += int(mask.sum())
    assert dual > 0  # the test exercises the bound
    expected = total / count
    _close(loss, expected)
    for g, e in zip(grads, torch.autograd.grad(expected, [p[0] for p in parts]), strict=True):
        _close(g, e)


def test_truncated_importance_weights():
    parts = _micro_batches()
    sampler = [o + 0.4 * torch.randn_like(o) for _, o, _, _, _ in parts]
    weights = [
        torch.clamp(torch.exp(o - s), max=1.5) for (_, o, _, _, _), s in zip(parts, sampler, strict=True)
    ]
    rows = [torch.ones(m.shape[0]) for *_, m, _ in parts]
    den = sum(loss_denominator(p[3], w, "constant", 7) for p, w in zip(parts, rows, strict=True))
    loss = sum(
        aggregate_loss(policy_loss_terms(lp, o, a, m, 0.2, 0.28, is_weights=w).loss, m, rw, "constant", den)
        for (lp, o, _, m, a), w, rw in zip(parts, weights, rows, strict=True)
    )
    total = 0.0
    for (logp, old, _, mask, adv), w in zip(parts, weights, strict=True):
        r = torch.exp(logp - old)
        a = adv.unsqueeze(1)
        total = total + (-torch.minimum(r * a, torch.clamp(r, 0.8, 1.28) * a) * w * mask).sum()
    expected = total / (7 * sum(m.shape[0] for *_, m, _ in parts))  # Dr. GRPO: rows x constant
    _close(loss, expected)
    got = torch.autograd.grad(loss, [p[0] for p in parts])
    for g, e in zip(got, torch.autograd.grad(expected, [p[0] for p in parts]), strict=True):
        _close(g, e)


def test_dapo_overlong_penalty():
    lengths = torch.tensor([0, 10, 12, 13, 16, 20])
    got = overlong_penalty(lengths, max_new_tokens=16, buffer=4, penalty=1.0).tolist()
    expected = [0.0 if n <= 12 else max(((16 - 4) - n) / 4, -1.0) for n in lengths.tolist()]
    assert got == pytest.approx(expected, abs=1e-12)
    assert overlong_penalty(lengths, 16, 4, 0.5).tolist()[4] == pytest.approx(-0.5)
    assert not math.isnan(sum(got))
