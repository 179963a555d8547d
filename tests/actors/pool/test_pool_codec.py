"""The compact result encoding round-trips exactly (no Ray)."""

from __future__ import annotations

import math
import pickle

from hypothesis import given
from hypothesis import strategies as st

from actors.pool.codec import component_sums, decode, encode, failed_block, reported_components
from rewards import ERROR, STATUSES, TIMEOUT, FenScorer, RewardConfig, ScoreResult
from rewards.config import UserRewardSpec

finite = st.floats(allow_nan=False, allow_infinity=False)
results = st.builds(
    ScoreResult,
    total=finite,
    components=st.dictionaries(st.sampled_from(["validity", "similarity", "exact", "mod:user"]), finite),
    status=st.sampled_from(STATUSES),
    reason=st.none() | st.text(max_size=20),
    info=st.none() | st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
)


@given(st.lists(results, max_size=50))
def test_decode_gives_back_what_was_encoded(items):
    enc = pickle.loads(pickle.dumps(encode(items)))
    assert decode(enc) == items
    assert enc.values() == [r.total for r in items]
    assert enc.statuses() == [r.status for r in items]
    for status in STATUSES:
        assert enc.count_status(status) == sum(r.status == status for r in items)


def test_component_order_and_absence_survive():
    items = [
        ScoreResult(1.0, {"b": 2.0, "a": 1.0}),
        ScoreResult.failed(ERROR, "boom"),
        ScoreResult(0.5, {"a": 0.0}),
    ]
    back = decode(encode(items))
    assert back == items and list(back[0].components) == ["b", "a"] and back[1].components == {}


def test_failed_block():
    block = failed_block(3, TIMEOUT, "too slow")
    assert decode(block) == [ScoreResult.failed(TIMEOUT, "too slow")] * 3
    assert block.count_status(TIMEOUT) == 3 and block.count_status(ERROR) == 0


rewards_sized = st.builds(  # components of the size rewards have (sums that do not overflow)
    ScoreResult,
    total=finite,
    components=st.dictionaries(
        st.sampled_from(["validity", "exact", "mod:user"]), st.floats(-1e6, 1e6, allow_nan=False)
    ),
    status=st.sampled_from(STATUSES),
)


@given(st.lists(st.lists(rewards_sized, max_size=20), max_size=4))
def test_component_sums_add_each_reported_component_over_the_items_that_have_it(chunks):
    reported = ("validity", "mod:user", "never")
    blocks = [encode(items, reported) for items in chunks] + [failed_block(2, TIMEOUT, "late")]
    sums = component_sums(blocks)
    everything = [r for items in chunks for r in items]
    expected = {
        name: (
            sum(r.components[name] for r in everything if name in r.components),
            sum(name in r.components for r in everything),
        )
        for name in reported
    }
    if not chunks:  # only a failed block: it reports no component
        expected = {}
    assert set(sums) == set(expected)
    for name, (total, count) in expected.items():
        assert sums[name][1] == count and math.isclose(sums[name][0], total, rel_tol=1e-9, abs_tol=1e-6)


def test_a_component_a_result_carries_but_the_scorer_does_not_name_is_not_summed():
    items = [ScoreResult(1.0, {"passed": 2.0, "total": 2.0, "sandbox_ok": 1.0}),
             ScoreResult(0.0, {"passed": 0.0, "total": 2.0, "sandbox_timeout": 1.0})]  # fmt: skip
    sums = component_sums([encode(items, ("passed", "total"))])
    assert sums == {"passed": (2.0, 2.0), "total": (4.0, 2.0)}
    parts = [ScoreResult(1.0, {"m:judge": 1.0, "m:judge/acc": 1.0}), ScoreResult(0.0, {"m:judge": 0.0})]
    assert component_sums([encode(parts, ("m:judge",))]) == {"m:judge": (1.0, 2.0), "m:judge/acc": (1.0, 1.0)}
    assert component_sums([encode(items)]) == {}  # nothing reported: nothing summed


def test_reported_components_are_the_scorers_own():
    cfg = RewardConfig(user=[UserRewardSpec(fn="user_rewards:length_bonus")])
    assert reported_components(FenScorer(cfg)) == (
        "validity",
        "similarity",
        "exact",
        "user_rewards:length_bonus",
    )
    assert reported_components(object()) == ()


def test_logged_extras_keep_their_items_across_blocks():
    from actors.pool.codec import block_extras, logged_extras

    first = [ScoreResult(1.0, info={"log_extra": {"a": 1}}), ScoreResult(0.0)]
    second = [ScoreResult(0.0, info={"turn": {}}), ScoreResult(1.0, info={"log_extra": {"a": 2}})]
    assert logged_extras(second) == {1: {"a": 2}}  # an environment's info is not a logged column
    assert block_extras([encode(first), encode(second)]) == {0: {"a": 1}, 3: {"a": 2}}
