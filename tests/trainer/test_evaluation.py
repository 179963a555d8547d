"""Held-out figures: exact match over the pairs with a target, pass@k and mean@k."""

import math

import pytest

from trainer.evaluation import exact_match, pass_at_k, sampled_figures


def test_exact_match_counts_only_pairs_with_a_target():
    assert exact_match(["a", "b", "c"], ["a", None, "x"]) == 0.5
    assert exact_match(["a"], [None]) is None


def brute_pass_at_k(n, c, k):
    """Share of the k-subsets of n samples (c of them passing) that hold at least one pass."""
    from itertools import combinations

    samples = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 0, 1), (4, 1, 1), (4, 1, 2), (5, 2, 3), (6, 3, 6), (3, 3, 2)])
def test_pass_at_k_is_the_unbiased_estimator(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k))


def test_pass_at_k_refuses_impossible_counts():
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(3, 1, 4)


def test_sampled_figures_per_prompt_and_over_usable_rewards():
    # prompt 0: one of 4 passes; prompt 1: none (one unusable, one just below full marks by rounding)
    values = [1.0, 0.5, 0.0, 0.25, 0.0, 0.75, 0.0, 1.0 - 1e-12]
    usable = [True, True, True, True, True, True, False, True]
    out = sampled_figures(values, usable, n=4, k=4, pass_reward=1.0)
    assert out["k"] == 4
    assert out["pass_at_k"] == pytest.approx((1.0 + 1.0) / 2)  # the rounded 1.0 counts as a pass
    assert out["pass_at_1"] == pytest.approx((0.25 + 0.25) / 2)
    assert out["mean_at_k"] == pytest.approx(sum(v for v, u in zip(values, usable, strict=True) if u) / 7)
    nothing = sampled_figures([0.0, 0.0], [False, False], n=2, k=2, pass_reward=1.0)
    assert nothing["pass_at_k"] == 0.0 and math.isnan(nothing["mean_at_k"])
    with pytest.raises(ValueError, match="whole groups of 4"):
        sampled_figures(values[:6], usable[:6], n=4, k=4, pass_reward=1.0)


def test_exact_match_strips_as_the_reward_does():
    assert exact_match(["  abc\n", "abd", "x"], ["abc", "abc", None]) == 0.5


def test_figures_by_group():
    from trainer.evaluation import figures_by_group

    got = figures_by_group(
        ["1", "2", "2"], ["a ", "b", "c"], ["a", "b", "x"], [1.0, 0.5, float("nan")], ["ok", "ok", "invalid"]
    )
    assert got == {
        "1": {"count": 1, "exact_match": 1.0, "valid_rate": 1.0, "reward_mean": 1.0},
        "2": {"count": 2, "exact_match": 0.5, "valid_rate": 0.5, "reward_mean": 0.5},
    }
