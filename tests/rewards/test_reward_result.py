import dataclasses
import pickle

import pytest

import rewards
from rewards import ERROR, OK, STATUSES, TIMEOUT, ScoreResult


def test_status_constants_are_exported_once():
    assert STATUSES == ("ok", "invalid", "unparsable", "too_long", "bad_input", "error", "timeout", "skipped")
    assert [getattr(rewards, name.upper()) for name in STATUSES] == list(STATUSES)


def test_result_is_frozen_slotted_and_picklable():
    r = ScoreResult(0.75, {"validity": 1.0}, OK)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.total = 1.0
    assert not hasattr(r, "__dict__")
    assert pickle.loads(pickle.dumps(r)) == r


def test_failed_helper():
    r = ScoreResult.failed(TIMEOUT, "took 5.0 s")
    assert (r.total, r.components, r.status, r.reason) == (0.0, {}, TIMEOUT, "took 5.0 s")
    assert not r.usable and not ScoreResult.failed(ERROR).usable
    assert ScoreResult(0.0, {}, "unparsable").usable


def test_failed_rejects_unknown_status():
    with pytest.raises(ValueError, match="unknown status 'oops'.*allowed: ok"):
        ScoreResult.failed("oops")
