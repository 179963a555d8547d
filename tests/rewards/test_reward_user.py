"""User rewards: resolution at construction, weighting, and errors kept as status `error`."""

import math
import pickle

import Levenshtein
import pydantic
import pytest

from rewards import (
    ERROR,
    OK,
    FenScorer,
    RewardConfig,
    RewardSpecError,
    UserRewardSpec,
    build_scorer,
    register_reward,
    registered_rewards,
    unregister_reward,
)

FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"


@pytest.fixture
def registered():
    """Register functions for one test and forget them afterwards."""
    names = []

    def add(name, fn, **kw):
        register_reward(name, fn, **kw)
        names.append(name)

    yield add
    for name in names:
        unregister_reward(name)


def scorer_with(*specs):
    return FenScorer(RewardConfig(user=[UserRewardSpec(fn=fn, weight=w) for fn, w in specs]))


def test_importable_user_reward_is_added_with_its_weight():
    scorer = scorer_with(("Levenshtein:ratio", 2.0))
    near = FEN[:-1] + "2"
    r = scorer.score(near, FEN)
    assert r.status == OK
    assert r.components["Levenshtein:ratio"] == Levenshtein.ratio(near, FEN)
    builtin = 0.25 * 1.0 + 0.5 * (1 - 1 / 58)
    assert r.total == pytest.approx(builtin + 2.0 * Levenshtein.ratio(near, FEN))
    assert scorer.component_names == ["validity", "similarity", "exact", "Levenshtein:ratio"]


def test_registered_function_object(registered):
    registered("length_bonus", lambda c, t: len(c) / 100)
    scorer = scorer_with(("length_bonus", 0.5))
    r = scorer.score(FEN, FEN)
    assert r.components["length_bonus"] == 0.58
    assert r.total == pytest.approx(1.0 + 0.5 * 0.58)
    assert "length_bonus" in registered_rewards()


def test_user_reward_sees_the_stripped_completion(registered):
    seen = []
    registered("spy", lambda c, t: seen.append(c) or 0.0)
    scorer_with(("spy", 1.0)).score("  e4  ", FEN)
    assert seen == ["e4"]


def test_user_reward_not_called_for_too_long(registered):
    calls = []
    registered("spy", lambda c, t: calls.append(c) or 0.0)
    r = FenScorer(RewardConfig(max_chars=10, user=[UserRewardSpec(fn="spy")])).score("x" * 11, FEN)
    assert r.components == {"validity": 0.0, "similarity": 0.0, "exact": 0.0, "spy": 0.0} and not calls


def boom(c, t):
    raise ZeroDivisionError("no reward today")


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (boom, "raised ZeroDivisionError: no reward today"),
        (lambda c, t: math.nan, "non-finite nan"),
        (lambda c, t: -math.inf, "non-finite -inf"),
        (lambda c, t: "0.5", "returned str '0.5', not a number"),
    ],
)
def test_failing_user_reward_is_an_error_with_reason(registered, fn, reason):
    registered("bad", fn)
    scorer = scorer_with(("bad", 1.0))
    r = scorer.score(FEN, FEN)
    assert r.status == ERROR and r.total == 0.0 and not r.usable
    assert "'bad'" in r.reason and reason in r.reason
    assert scorer.score_batch([FEN, FEN], [FEN, FEN]) == [r, r]


def test_numpy_and_int_results_count_as_numbers(registered):
    np = pytest.importorskip("numpy")
    registered("np", lambda c, t: np.float32(0.5))
    registered("one", lambda c, t: 1)
    r = scorer_with(("np", 1.0), ("one", 1.0)).score(FEN, FEN)
    assert r.status == OK and r.components["np"] == 0.5 and r.components["one"] == 1.0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("Levenshtein:no_such_function", "has no attribute 'no_such_function'"),
        ("Levenshtein:__doc__", "not callable"),
        ("never_registered", "not registered in this process"),
    ],
)
def test_unresolvable_spec_fails_at_construction(spec, message):
    config = RewardConfig(user=[UserRewardSpec(fn=spec)])  # the format is fine
    with pytest.raises(RewardSpecError, match=message):
        FenScorer(config)


@pytest.mark.parametrize("spec", ["a.b", "pkg.mod:", ":fn", "pkg mod:fn", "a:b:c", "", "1abc:f"])
def test_malformed_spec_string_is_rejected_by_the_config(spec):
    with pytest.raises(pydantic.ValidationError, match="package.module:function"):
        UserRewardSpec(fn=spec)


def test_user_reward_may_not_shadow_a_builtin_component():
    with pytest.raises(pydantic.ValidationError, match="clashes with a built-in component"):
        UserRewardSpec(fn="similarity")
    with pytest.raises(RewardSpecError, match="clashes"):
        register_reward("exact", lambda c, t: 0.0)


def test_register_rejects_bad_names_non_callables_and_silent_overwrites(registered):
    with pytest.raises(RewardSpecError, match="bare identifier"):
        register_reward("pkg.mod:f", lambda c, t: 0.0)
    with pytest.raises(RewardSpecError, match="not callable"):
        register_reward("x", 3)
    registered("dup", lambda c, t: 0.0)
    with pytest.raises(RewardSpecError, match="already registered"):
        register_reward("dup", lambda c, t: 1.0)
    registered("dup", lambda c, t: 1.0, replace=True)


def test_scorer_pickles_with_its_resolved_functions():
    scorer = scorer_with(("Levenshtein:ratio", 1.0))
    scorer.score_batch([FEN], [FEN])
    clone = pickle.loads(pickle.dumps(scorer))
    assert clone.score(FEN, FEN) == scorer.score(FEN, FEN)
    assert clone.cache_info()["size"] == 0  # the memo starts empty on the other side


def test_build_scorer_accepts_a_mapping():
    scorer = build_scorer({"max_chars": 64, "user": [{"fn": "Levenshtein:ratio", "weight": 0.1}]})
    assert scorer.config.max_chars == 64 and scorer.config.user[0].weight == 0.1
    with pytest.raises(pydantic.ValidationError, match="max_char"):
        build_scorer({"max_char": 64})
    with pytest.raises(TypeError, match="config must be a RewardConfig"):
        FenScorer({"max_chars": 64})
