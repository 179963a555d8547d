"""A step's reward figures from its sums: one rank's, or several ranks' combined."""

import pytest
import torch

from trainer.config import GRPOConfig
from trainer.grpo.reward_source import Rewards
from trainer.grpo.selection import select_groups, skip_record
from trainer.grpo.shaping import Shaped
from trainer.grpo.step_figures import combined, step_figures, step_sums


def _sums(values, statuses, *, stats=None, components=None, logged=None, delta=None, group_size=2):
    usable = [s == "ok" for s in statuses]
    scored = Rewards(
        values, usable, statuses, stats=stats or {}, components=components or {}, logged=logged or {}
    )
    shift = torch.tensor(delta or [0.0] * len(values), dtype=torch.float64)
    shaped_values = [v + float(d) if u else v for v, d, u in zip(values, shift, usable, strict=True)]
    shaped = Shaped(
        Rewards(shaped_values, usable, statuses),
        truncated=torch.tensor([i == 0 for i in range(len(values))]),
        kl_penalty=torch.zeros(len(values), dtype=torch.float64),
        delta=shift,
    )
    sel = select_groups(shaped.rewards, group_size, GRPOConfig())
    return step_sums(shaped, sel, scored, group_size, gather=None)


def test_reward_mean_is_the_tasks_own_over_usable_groups():
    # Shaping (an overlong penalty) moves what advantages see, not the reported task reward; the
    # group with an error is left out of the mean, not counted as 0.
    sums = _sums([1.0, 0.0, 0.5, 9.0], ["ok", "ok", "ok", "error"], delta=[-0.5, 0.0, 0.0, 0.0])
    figures = step_figures(sums)
    assert figures["reward_mean"] == 0.5
    assert (figures["groups"], figures["unusable_groups"], figures["completions"]) == (2, 1, 4)
    assert figures["reward_ok_frac"] == 0.75 and figures["truncated_frac"] == 0.25
    assert "reward_metrics" not in figures and "reward_components" not in figures  # none logged


def test_no_usable_reward_is_none_not_nan():
    assert step_figures(_sums([0.0, 0.0], ["error", "ok"]))["reward_mean"] is None


def test_ranks_combine_to_the_whole_steps_figures():
    first = _sums(
        [1.0, 0.0], ["ok", "ok"],
        stats={"reward_items": 2.0, "reward_wait_s": 0.5, "worker_restarts": 1.0, "placement_inline": 1.0},
        components={"valid": (1.0, 2.0)}, logged={"exact": (0.5, 1.0)},
    )  # fmt: skip
    second = _sums(
        [1.0, 1.0, 1.0, 0.0], ["ok"] * 4,
        stats={"reward_items": 4.0, "reward_wait_s": 0.2, "worker_restarts": 1.0, "placement_inline": 0.0},
        components={"valid": (3.0, 4.0), "format": (2.0, 4.0)}, logged={"exact": (1.5, 2.0)},
    )  # fmt: skip
    figures = step_figures(combined([first, second]))
    assert figures["reward_mean"] == pytest.approx(4 / 6)
    assert (figures["groups"], figures["completions"]) == (3, 6)
    assert figures["reward_components"] == {"valid": pytest.approx(4 / 6), "format": 0.5}
    assert figures["reward_metrics"] == {"exact": pytest.approx(2 / 3)}  # log_metric: over every call
    assert figures["scorer_reward_items"] == 6  # counts add up
    assert figures["scorer_reward_wait_s"] == 0.5  # the slowest rank's wait
    assert figures["scorer_worker_restarts"] == 1  # the shared workers, seen by both ranks
    assert figures["scorer_placement_inline"] == 0.5  # the share of ranks scoring in process


def test_skip_reason_counts_every_ranks_groups():
    equal = _sums([1.0, 1.0], ["ok", "ok"])
    failed = _sums([1.0, 0.0], ["ok", "error"])
    record = skip_record(combined([equal, failed]))
    assert (
        record["skip_reason"]
        == "no update: all 2 groups dropped (1 with a failed reward; 1 with equal rewards)"
    )
    assert record["loss"] is None and record["skipped"] == 1.0
