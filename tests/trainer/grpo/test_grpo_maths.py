"""GRPO maths against hand-computed numbers."""

import math

import pytest
import torch

from trainer.grpo import (
    aggregate_loss,
    group_advantages,
    k3_kl,
    loss_denominator,
    masked_mean,
    policy_loss_terms,
    zero_variance_groups,
)

# Two groups of K=4. Group 0: mean 0.5, population std 0.5. Group 1: mean 3, deviations
# (-2, -1, 0, 3), population variance 14/4 = 3.5. All eight: mean 1.75, population variance 27.5/8.
REWARDS = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 3.0, 6.0])


def test_group_scale_uses_population_std():
    adv = group_advantages(REWARDS, 4, "group", eps=1e-6)
    s1 = math.sqrt(3.5)
    expected = [-0.5 / 0.5, -0.5 / 0.5, 0.5 / 0.5, 0.5 / 0.5, -2 / s1, -1 / s1, 0.0, 3 / s1]
    # eps is added to the std: 1e-6 changes the 7th significant digit only
    assert adv.tolist() == pytest.approx(expected, rel=1e-5)
    # the unbiased std would give group 0 advantages of +-0.866, not +-1
    assert adv[:4].abs().tolist() == pytest.approx([1.0] * 4, rel=1e-5)


def test_group_scale_unit_rms_per_group():
    adv = group_advantages(torch.randn(6 * 5, dtype=torch.float64), 5, "group", eps=1e-12).view(6, 5)
    torch.testing.assert_close(adv.pow(2).mean(dim=1), torch.ones(6, dtype=torch.float64))


def test_batch_scale_uses_std_of_all_rewards():
    adv = group_advantages(REWARDS, 4, "batch", eps=1e-6)
    s = math.sqrt(27.5 / 8)
    expected = [d / s for d in (-0.5, -0.5, 0.5, 0.5, -2.0, -1.0, 0.0, 3.0)]
    assert adv.tolist() == pytest.approx(expected, rel=1e-5)


def test_none_scale_is_mean_centred_only():
    adv = group_advantages(REWARDS, 4, "none")
    assert adv.tolist() == [-0.5, -0.5, 0.5, 0.5, -2.0, -1.0, 0.0, 3.0]


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_equal_rewards_give_zero_advantage(scale):
    adv = group_advantages(torch.tensor([0.3, 0.3, 0.3, 1.0, 0.0, 0.5]), 3, scale)
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]
    assert adv[3:].abs().sum() > 0


@pytest.mark.parametrize(
    ("rewards", "group_size", "scale", "match"),
    [
        (torch.zeros(7), 4, "group", "multiple of group_size"),
        (torch.zeros(0), 4, "group", "multiple of group_size"),
        (torch.zeros(8), 0, "group", "group_size"),
        (torch.zeros(8), 4, "std", "scale must be one of"),
        (torch.zeros(2, 4), 4, "group", "1-D"),
        (torch.zeros(8, dtype=torch.long), 4, "group", "floating-point"),
    ],
)
def test_group_advantages_rejects_bad_input(rewards, group_size, scale, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards, group_size, scale)


def test_zero_variance_groups():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.5, 0.0, 0.2, 0.2 + 1e-8, 0.2], dtype=torch.float64)
    assert zero_variance_groups(rewards, 3, tol=1e-6).tolist() == [True, False, True]
    assert zero_variance_groups(rewards, 3, tol=0.0).tolist() == [True, False, False]
    with pytest.raises(ValueError, match="multiple of group_size"):
        zero_variance_groups(rewards, 4, tol=0.0)


def test_k3_is_nonnegative_and_zero_at_equality():
    logp = torch.randn(64, 16, dtype=torch.float64)
    ref = logp + 0.5 * torch.randn(64, 16, dtype=torch.float64)  # |r| < 2.6: inside the k3 clamp
    kl = k3_kl(logp, ref)
    assert (kl >= 0).all()
    r = ref - logp
    torch.testing.assert_close(kl, torch.exp(r) - r - 1)
    assert k3_kl(logp, logp).abs().max().item() == 0.0


def _one_token(ratio: float, advantage: float, clip_low=0.2, clip_high=0.28):
    old = torch.tensor([[-1.0]], dtype=torch.float64)
    logp = (old + math.log(ratio)).clone().requires_grad_(True)
    terms = policy_loss_terms(
        logp, old, torch.tensor([advantage], dtype=torch.float64), torch.tensor([[True]]), clip_low, clip_high
    )
    terms.loss.sum().backward()
    return terms.loss.item(), logp.grad.item(), terms.clipped.item()


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "grad", "clipped"),
    [
        (1.5, 1.0, -1.28, 0.0, True),  # A>0 above 1+clip_high: clipped, no gradient
        (0.5, 1.0, -0.5, -0.5, False),  # A>0 below 1-clip_low: the unclipped term is the min
        (0.5, -1.0, 0.8, 0.0, True),  # A<0 below 1-clip_low: clipped, no gradient
        (1.5, -1.0, 1.5, 1.5, False),  # A<0 above 1+clip_high: unclipped (pessimistic) term
        (1.1, 2.0, -2.2, -2.2, False),  # inside the trust region: d(-ratio*A)/dlogp = -ratio*A
        (1.0, 0.0, 0.0, 0.0, False),
    ],
)
def test_clipped_surrogate_loss_and_gradient(ratio, adv, loss, grad, clipped):
    got_loss, got_grad, got_clipped = _one_token(ratio, adv)
    assert got_loss == pytest.approx(loss, abs=1e-12)
    assert got_grad == pytest.approx(grad, abs=1e-12)
    assert got_clipped == clipped


def test_kl_term_added_with_beta_and_its_gradient():
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0]], dtype=torch.float64)
    terms = policy_loss_terms(
        logp,
        logp.detach(),
        torch.zeros(1, dtype=torch.float64),
        torch.ones(1, 2, dtype=torch.bool),
        0.2,
        0.2,
        ref,
        beta=0.5,
    )
    r = -0.5
    assert terms.kl.tolist()[0] == pytest.approx([math.exp(r) - r - 1, 0.0])
    terms.loss.sum().backward()
    # d/dlogp of beta * (exp(ref - logp) - (ref - logp) - 1) = beta * (1 - exp(ref - logp))
    assert logp.grad.tolist()[0] == pytest.approx([0.5 * (1 - math.exp(r)), 0.0])


def test_masked_positions_never_poison_the_loss():
    logp = torch.tensor([[-1.0, float("inf")], [-0.5, float("nan")]], requires_grad=True)
    old = torch.tensor([[-1.0, -float("inf")], [-0.5, 0.0]])
    mask = torch.tensor([[True, False], [True, False]])
    terms = policy_loss_terms(logp, old, torch.tensor([1.0, -1.0]), mask, 0.2, 0.28, old.clone(), beta=0.1)
    loss = aggregate_loss(terms.loss, mask, torch.ones(2), "token", 2.0)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(logp.grad).all()
    assert logp.grad[:, 1].tolist() == [0.0, 0.0]


def test_policy_loss_terms_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="same"):
        policy_loss_terms(
            torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2), torch.ones(2, 3, dtype=torch.bool), 0.2, 0.2
        )
    with pytest.raises(ValueError, match="advantages"):
        policy_loss_terms(
            torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3, dtype=torch.bool), 0.2, 0.2
        )
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss_terms(
            torch.zeros(2, 3),
            torch.zeros(2, 3),
            torch.zeros(2),
            torch.ones(2, 3, dtype=torch.bool),
            0.2,
            0.2,
            beta=0.1,
        )


# Two rows: row 0 has 3 tokens of loss 1, 2, 3; row 1 has 1 token of loss 10.
PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0], [10.0, 99.0, 99.0]])
MASK = torch.tensor([[True, True, True], [True, False, False]])
ROWS = torch.ones(2)


@pytest.mark.parametrize(
    ("agg", "expected"),
    [
        ("token", (1 + 2 + 3 + 10) / 4),  # every token weighs the same
        ("sequence", ((1 + 2 + 3) / 3 + 10 / 1) / 2),  # mean per row, then over rows
        ("constant", (1 + 2 + 3 + 10) / (2 * 5)),  # Dr. GRPO: sum / (rows * constant)
    ],
)
def test_aggregation_modes(agg, expected):
    denom = loss_denominator(MASK, ROWS, agg, loss_constant=5)
    assert aggregate_loss(PER_TOKEN, MASK, ROWS, agg, denom).item() == pytest.approx(expected)


@pytest.mark.parametrize("agg", ["token", "sequence", "constant"])
def test_aggregation_is_split_invariant_with_a_global_denominator(agg):
    gen = torch.Generator().manual_seed(0)
    per_token = torch.rand(8, 6, generator=gen)
    mask = torch.rand(8, 6, generator=gen) > 0.3
    mask[:, 0] = True
    rows = torch.tensor([1, 1, 0, 0, 1, 1, 1, 1.0])  # one dropped group of K=2
    whole = aggregate_loss(per_token, mask, rows, agg, loss_denominator(mask, rows, agg, 6))
    denom = sum(loss_denominator(mask[s], rows[s], agg, 6) for s in (slice(0, 3), slice(3, 8)))
    parts = sum(
        aggregate_loss(per_token[s], mask[s], rows[s], agg, denom) for s in (slice(0, 3), slice(3, 8))
    )
    torch.testing.assert_close(parts, whole)


def test_dropped_rows_do_not_count():
    rows = torch.tensor([1.0, 0.0])
    assert loss_denominator(MASK, rows, "token", 1).item() == 3
    assert aggregate_loss(PER_TOKEN, MASK, rows, "token", 3.0).item() == pytest.approx(2.0)


def test_masked_mean():
    values = torch.tensor([[1.0, float("nan")], [3.0, 5.0]])
    mask = torch.tensor([[True, False], [True, True]])
    assert masked_mean(values, mask).item() == pytest.approx(3.0)
    assert masked_mean(values, torch.zeros_like(mask)).item() == 0.0


def test_config_rejects_ref_on_cpu_without_a_reference():
    from pydantic import ValidationError

    from trainer.config import GRPOConfig

    with pytest.raises(ValidationError, match="ref_on_cpu=true does nothing with beta=0"):
        GRPOConfig(beta=0.0, ref_on_cpu=True)
    assert GRPOConfig(beta=0.1, ref_on_cpu=True).ref_on_cpu
