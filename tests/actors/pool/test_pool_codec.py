"""The compact result encoding round-trips exactly (no Ray)."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from actors.pool.codec import count_status, decode, encode, failed_block
from rewards import ERROR, STATUSES, TIMEOUT, ScoreResult

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
        assert count_status(enc, status) == sum(r.status == status for r in items)


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
    assert count_status(block, TIMEOUT) == 3 and count_status(block, ERROR) == 0
