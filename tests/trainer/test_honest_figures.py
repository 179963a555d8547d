"""Figures that stay honest when rewards fail: a step with no update has no loss or KL (not 0) and
says why; held-out figures count items per status and give the mean over scored items too."""

from __future__ import annotations

import math

from tests.trainer.tiny_setup import CHESS_TOKENIZER, PAIRS, small_cfg
from trainer.engine import Trainer
from trainer.evaluation import summarise_eval
from trainer.grpo.reward_source import InlineRewards, Rewards


def _all_failed(completions, targets):
    n = len(completions)
    return Rewards(values=[0.0] * n, usable=[False] * n, statuses=["error"] * n)


def test_a_step_whose_groups_all_failed_is_skipped_with_no_loss_or_kl():
    trainer = Trainer(small_cfg(), CHESS_TOKENIZER)
    m = trainer.grpo_step(PAIRS, InlineRewards(_all_failed))
    assert m["skipped"] == 1.0 and m["empty_update"] == 1.0
    assert m["loss"] is None and m["kl"] is None and m["grad_norm"] is None
    assert m["reward_mean"] is None  # no reward was computed: not nan, not 0
    assert m["skip_reason"] == "no update: all 4 groups dropped (4 with a failed reward)"
    assert m["groups"] == 4.0 and m["unusable_groups"] == 4.0


def test_zero_variance_steps_without_kl_say_so_too():
    trainer = Trainer(small_cfg(beta=0.0), CHESS_TOKENIZER)  # with a KL term, equal groups still regularise
    m = trainer.grpo_step(PAIRS, InlineRewards(lambda c, t: [0.5] * len(c)))
    assert m["skip_reason"] == "no update: all 4 groups dropped (4 with equal rewards)" and m["loss"] is None


def _with_parts(completions, targets):
    """A scorer with two named components, one of which only some items have."""
    n = len(completions)
    lengths = [float(len(c)) for c in completions]
    has_a = [i % 2 == 0 for i in range(n)]
    return Rewards(
        values=[v / 10 for v in lengths],
        usable=[True] * n,
        statuses=["ok"] * n,
        components={
            "length": (sum(lengths), float(n)),
            "even": (sum(v for v, a in zip(lengths, has_a, strict=True) if a), float(sum(has_a))),
            "absent": (0.0, 0.0),
        },
    )


def test_a_step_reports_each_component_mean_over_the_items_that_have_it():
    trainer = Trainer(small_cfg(), CHESS_TOKENIZER)
    seen: list[list[str]] = []

    def score(completions, targets):
        seen.append(list(completions))
        return _with_parts(completions, targets)

    m = trainer.grpo_step(PAIRS, InlineRewards(score))
    everything = [c for chunk in seen for c in chunk]
    evens = [c for chunk in seen for i, c in enumerate(chunk) if i % 2 == 0]
    assert set(m["reward_components"]) == {"length", "even"}  # a component no item had is left out
    assert math.isclose(m["reward_components"]["length"], sum(map(len, everything)) / len(everything))
    assert math.isclose(m["reward_components"]["even"], sum(map(len, evens)) / len(evens))
    plain = trainer.grpo_step(PAIRS, InlineRewards(lambda c, t: [0.5] * len(c)))
    assert "reward_components" not in plain  # a scorer that names none: no key, not {}


def test_held_out_figures_count_statuses_and_the_scored_mean():
    values = [1.0, 0.5, 0.0, 0.0]
    statuses = ["ok", "ok", "error", "invalid"]
    usable = [True, True, False, True]
    out = summarise_eval(["p"] * 4, ["t"] * 4, ["a"] * 4, values, statuses, 0, usable)
    assert out["statuses"] == {"ok": 2, "error": 1, "invalid": 1}
    assert out["reward_mean"] == 0.375  # every item, the failed one counting 0
    assert out["scored"] == 3 and math.isclose(out["reward_mean_scored"], 0.5)
