"""The addition example: its data are deterministic and disjoint, its reward scores as documented,
and its config resolves to a text run."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.addition.make_data import make
from examples.addition.reward import addition_reward
from rewards import reward_params
from service.config import load_config

REPO = Path(__file__).resolve().parents[2]


def test_data_are_deterministic_with_disjoint_held_out_prompts():
    train, held = make(seed=0, digits=2, train=2000, held_out=50)
    assert (train, held) == make(seed=0, digits=2, train=2000, held_out=50)
    assert make(seed=1, digits=2, train=2000, held_out=50) != (train, held)
    assert not {r["prompt"] for r in held} & {r["prompt"] for r in train}
    assert len({r["prompt"] for r in held}) == 50
    for r in train + held:
        assert r["prompt"] == f"{r['a']}+{r['b']}=" and r["target"] == str(r["a"] + r["b"])
        assert 0 <= r["a"] < 100 and 0 <= r["b"] < 100
    assert {len(str(r["a"])) for r in train} == {1, 2}


@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        ("132", 1.0),  # 47 + 85
        ("122", 0.5 * 2 / 3),  # hundreds and units right
        ("32", 0.5 * 2 / 3),  # compared from the units up: 32 vs 132
        ("1320", 0.0),  # every digit shifted
        ("", 0.0),
        ("13a", 0.0),
        ("-132", 0.0),
        ("１３２", 0.0),  # full-width digits are not a plain decimal number
    ],
)
def test_reward_gives_full_partial_and_no_credit(completion, reward):
    assert addition_reward(completion, 47, 85) == pytest.approx(reward)


def test_reward_takes_the_row_fields_by_name_and_the_config_resolves():
    params = reward_params(addition_reward)
    assert params.by_name and params.required == ("a", "b")
    cfg = load_config(config_file=str(REPO / "examples" / "addition" / "config.yaml"))
    assert cfg.task.name == "text" and cfg.reward.user[0].fn == "examples.addition.reward:addition_reward"
    assert cfg.grpo.eval_k == 8
