"""The scorer every task shares: named components with weights, the user rewards on top, one set of
statuses; the fen, move, code and user-only scorers are made of it, none of another."""

from __future__ import annotations

import pickle

import pytest

from rewards import (
    BAD_INPUT,
    ERROR,
    INVALID,
    OK,
    TOO_LONG,
    UNPARSABLE,
    FenScorer,
    MoveScorer,
    Part,
    RewardComponent,
    RewardConfig,
    RewardSpecError,
    Scorer,
    UserRewardScorer,
    register_reward,
    unregister_reward,
)
from rewards.code import CodeScorer


class Length(RewardComponent):
    name = "length"

    def judge(self, completion, target, fields):
        return Part({"length": float(len(completion))}, float(len(completion)))


class Vowels(RewardComponent):
    """Marks an item without vowels invalid; reports two values."""

    name = "vowels"
    needs_target = True

    @property
    def reports(self):
        return ("vowels", "target_vowels")

    def judge(self, completion, target, fields):
        count = sum(c in "aeiou" for c in completion)
        return Part(
            {"vowels": count, "target_vowels": sum(c in "aeiou" for c in target)},
            count,
            OK if count else INVALID,
        )


class Broken(RewardComponent):
    name = "broken"

    def judge(self, completion, target, fields):
        raise RuntimeError("a bug")


def test_the_total_is_each_components_reward_times_its_weight_then_the_user_rewards():
    register_reward("one", lambda completion: 1.0, replace=True)
    try:
        scorer = Scorer([(Length(), 0.5), (Vowels(), 2.0)], RewardConfig(user=[{"fn": "one", "weight": 3.0}]))
        r = scorer.score("  banana ", "kiwi")
        assert r.total == 0.5 * 6 + 2.0 * 3 + 3.0 * 1.0 and r.status == OK
        assert r.components == {"length": 6.0, "vowels": 3, "target_vowels": 2, "one": 1.0}
        assert scorer.component_names == ["length", "vowels", "target_vowels", "one"]
        assert scorer.score_batch(["  banana ", "xyz"], ["kiwi", "kiwi"]) == [r, scorer.score("xyz", "kiwi")]
    finally:
        unregister_reward("one")


def test_statuses_are_the_first_components_mark_and_the_scorers_own():
    scorer = Scorer([(Length(), 1.0), (Vowels(), 1.0)], RewardConfig(max_chars=5))
    assert scorer.score("xyz", "a").status == INVALID  # the component's mark, its reward kept
    assert scorer.score("xyz", "a").total == 3.0
    too_long = scorer.score("aaaaaa", "a")
    assert too_long.status == TOO_LONG and too_long.components == dict.fromkeys(scorer.component_names, 0.0)
    assert scorer.score("abc", None).status == BAD_INPUT  # Vowels reads the target
    assert Scorer([(Length(), 1.0)]).score("abc", None).status == OK  # no component reads it
    failed = Scorer([(Broken(), 1.0)]).score("abc", "t")
    assert failed.status == ERROR and failed.reason == "scoring failed: RuntimeError: a bug"


def test_a_scorer_is_made_of_components_and_refuses_anything_else_in_one_line():
    with pytest.raises(TypeError, match=r"\(RewardComponent, weight\) pairs, got RewardConfig; .*FenScorer"):
        Scorer(RewardConfig())
    with pytest.raises(ValueError, match="needs at least one"):
        Scorer()
    register_reward("length", lambda completion: 0.0, replace=True)
    try:
        with pytest.raises(RewardSpecError, match="'length' clashes with a component"):
            Scorer([(Length(), 1.0)], RewardConfig(user=[{"fn": "length"}]))
    finally:
        unregister_reward("length")


def test_a_scorer_pickles_with_its_components_and_weights():
    scorer = Scorer([(Length(), 0.25)], data_source="lengths")
    again = pickle.loads(pickle.dumps(scorer))
    assert again.score("abcd", None) == scorer.score("abcd", None) and again.users.data_source == "lengths"


def test_no_task_scorer_is_a_chess_scorer():
    move = MoveScorer()
    code = CodeScorer()
    register_reward("length_only", lambda completion: float(len(completion)), replace=True)
    try:
        user = UserRewardScorer(RewardConfig(user=[{"fn": "length_only"}]))
    finally:
        unregister_reward("length_only")
    for scorer in (move, code, user):
        assert isinstance(scorer, Scorer) and not isinstance(scorer, FenScorer)
    assert [type(c.component).__name__ for c in FenScorer().components] == [
        "FenValidity",
        "Similarity",
        "ExactMatch",
    ]
    assert [type(c.component).__name__ for c in move.components] == ["MoveQuality"]
    assert [type(c.component).__name__ for c in code.components] == ["TestsPassed"]
    assert user.components == () and move.component_names == ["legal", "quality", "cp_loss"]
    assert (move.users.data_source, code.users.data_source, user.users.data_source) == (
        "move",
        "code",
        "text",
    )
    assert FenScorer().score("8/8/8 w", "8/8/8/8/8/8/8/8 w - - 0 1").status == UNPARSABLE
