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


def test_held_out_figures_count_statuses_and_the_scored_mean():
    values = [1.0, 0.5, 0.0, 0.0]
    statuses = ["ok", "ok", "error", "invalid"]
    usable = [True, True, False, True]
    out = summarise_eval(["p"] * 4, ["t"] * 4, ["a"] * 4, values, statuses, 0, usable)
    assert out["statuses"] == {"ok": 2, "error": 1, "invalid": 1}
    assert out["reward_mean"] == 0.375  # every item, the failed one counting 0
    assert out["scored"] == 3 and math.isclose(out["reward_mean_scored"], 0.5)
