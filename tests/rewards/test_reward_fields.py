"""User rewards that take the prompt and row fields by name, and the scorer of user rewards alone."""

import pickle

import pytest

from rewards import (
    BAD_INPUT,
    ERROR,
    OK,
    TOO_LONG,
    FenScorer,
    RewardConfig,
    RewardSignatureError,
    UserRewardScorer,
    UserRewardSpec,
    register_reward,
    reward_params,
    unregister_reward,
)

FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"


@pytest.fixture
def registered():
    names = []

    def add(name, fn):
        register_reward(name, fn, replace=True)
        names.append(name)

    yield add
    for name in names:
        unregister_reward(name)


def user_only(*names, max_chars=512):
    return UserRewardScorer(RewardConfig(max_chars=max_chars, user=[UserRewardSpec(fn=n) for n in names]))


def sum_checker(completion, a, b):
    return 1.0 if completion == str(a + b) else 0.0


def with_default(completion, target, unit="cm"):
    return float(completion == f"{target}{unit}")


def takes_everything(completion, **row):
    return float(len(row))


def prompt_len(completion, prompt):
    return float(len(prompt))


def test_positional_convention_for_other_names_and_unreadable_signatures():
    legacy = reward_params(lambda c, t: 0.0)
    assert not legacy.by_name and legacy.required == ("target",)
    import Levenshtein

    assert not reward_params(Levenshtein.ratio).by_name  # a C function: no signature to read


def test_by_name_convention_reads_fields_and_defaults():
    p = reward_params(sum_checker)
    assert p.by_name and p.fields == ("a", "b") and p.required == ("a", "b") and not p.takes_target
    p = reward_params(with_default)
    assert p.takes_target and p.fields == ("unit",) and p.required == ("target",)
    p = reward_params(takes_everything)
    assert p.any_field and p.fields == () and p.required == ()


def test_positional_only_parameter_cannot_be_served_by_name():
    def bad(x, /, completion):
        return 0.0

    with pytest.raises(RewardSignatureError, match="'x' is positional-only"):
        reward_params(bad, "mod:bad")


def test_a_reward_gets_only_the_fields_it_names(registered):
    seen = []
    registered("checker", lambda completion, a, b: seen.append((completion, a, b)) or float(a + b))
    scorer = user_only("checker")
    r = scorer.score(" 5 ", "5", {"a": 2, "b": 3, "c": "unused", "prompt": "2+3="})
    assert r.status == OK and r.total == 5.0 and r.components == {"checker": 5.0}
    assert seen == [("5", 2, 3)]  # stripped completion, the two fields it names


def test_defaults_apply_when_a_field_is_absent_and_kwargs_take_every_field(registered):
    registered("default", with_default)
    registered("every", takes_everything)
    scorer = user_only("default", "every")
    r = scorer.score("3cm", "3", {"x": 1})
    assert r.components == {"default": 1.0, "every": 2.0}  # **row got x and target
    assert scorer.score("3in", "3", {"unit": "in"}).components["default"] == 1.0


def test_a_missing_required_field_is_an_error_with_its_name(registered):
    registered("checker", sum_checker)
    r = user_only("checker").score("5", "5", {"a": 2})
    assert r.status == ERROR and "needs 'b', which this item lacks" in r.reason


def test_user_only_scorer_has_no_chess_components_and_accepts_no_target(registered):
    registered("length", lambda completion: float(len(completion)))
    scorer = user_only("length", max_chars=4)
    assert scorer.component_names == ["length"]
    assert scorer.score("abc", None) == scorer.score("abc", "anything")
    assert scorer.score("abc", None).total == 3.0
    assert scorer.score("abcde", None).status == TOO_LONG
    assert scorer.score(7, None).status == BAD_INPUT
    assert scorer.score("abc", 7).status == BAD_INPUT  # a target, when given, is text


def test_user_only_scorer_needs_a_user_reward():
    with pytest.raises(ValueError, match="needs at least one"):
        UserRewardScorer(RewardConfig())


def test_batches_carry_one_field_row_per_item_and_match_single_scores(registered):
    registered("checker", sum_checker)
    scorer = user_only("checker")
    rows = [{"a": 1, "b": 1}, {"a": 2, "b": 2}]
    batch = scorer.score_batch(["2", "5"], ["2", "4"], rows)
    assert [r.total for r in batch] == [1.0, 0.0]
    assert batch == [scorer.score(c, t, f) for c, t, f in zip(["2", "5"], ["2", "4"], rows, strict=True)]
    with pytest.raises(ValueError, match="1 field rows for 2 completions"):
        scorer.score_batch(["2", "5"], ["2", "4"], rows[:1])


def test_fen_scorer_passes_fields_to_user_rewards_and_pickles(registered):
    registered("prompt_len", prompt_len)
    scorer = FenScorer(RewardConfig(user=[UserRewardSpec(fn="prompt_len", weight=0.5)]))
    r = scorer.score(FEN, FEN, {"prompt": "e4"})
    assert r.components["prompt_len"] == 2.0 and r.total == pytest.approx(1.0 + 0.5 * 2.0)
    again = pickle.loads(pickle.dumps(user_only("prompt_len")))
    assert isinstance(again, UserRewardScorer) and again.score("x", None, {"prompt": "abc"}).total == 3.0
