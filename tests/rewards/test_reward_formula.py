"""The default score on hand-worked examples (weights 0.25 validity, 0.5 similarity, 0.25 exact)."""

import math

import chess
import pytest

from rewards import (
    BAD_INPUT,
    INVALID,
    OK,
    TOO_LONG,
    UNPARSABLE,
    FenRewardConfig,
    FenScorer,
    RewardConfig,
    score,
    score_batch,
)

AFTER_E4 = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"  # 58 chars
BOARD_PART = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR"  # 45 chars
# Black to move while the white king on e1 is attacked by the rook on h1: parses, not valid.
WRONG_SIDE_IN_CHECK = "4k3/8/8/8/8/8/8/4K2r b - - 0 1"


def check(result, *, status, validity, similarity, exact):
    assert result.status == status
    assert result.components == pytest.approx(
        {"validity": validity, "similarity": similarity, "exact": exact}
    )
    assert result.total == pytest.approx(0.25 * validity + 0.5 * similarity + 0.25 * exact)
    return result


def both(completion, target):
    """score() of one pair, checked to equal score_batch() exactly (same floats)."""
    single = score(completion, target)
    assert score_batch([completion], [target]) == [single]
    return single


def test_exact_hit_scores_one():
    r = check(both(AFTER_E4, AFTER_E4), status=OK, validity=1.0, similarity=1.0, exact=1.0)
    assert r.total == 1.0 and r.reason is None


def test_valid_fen_one_character_off():
    near = AFTER_E4[:-1] + "2"  # fullmove 2 instead of 1: still a valid position
    check(both(near, AFTER_E4), status=OK, validity=1.0, similarity=1 - 1 / 58, exact=0.0)
    assert both(near, AFTER_E4).total == pytest.approx(0.25 + 0.5 * 57 / 58)


def test_surrounding_whitespace_is_stripped():
    check(both(f"  \n{AFTER_E4}\t\n", AFTER_E4), status=OK, validity=1.0, similarity=1.0, exact=1.0)


def test_board_part_only_parses_but_is_not_six_fields():
    assert chess.Board(BOARD_PART).is_valid()  # python-chess fills the missing fields in
    check(both(BOARD_PART, AFTER_E4), status=INVALID, validity=0.5, similarity=45 / 58, exact=0.0)


def test_five_fields_is_invalid_even_if_position_is_fine():
    five = AFTER_E4.rsplit(" ", 1)[0]
    check(both(five, AFTER_E4), status=INVALID, validity=0.5, similarity=56 / 58, exact=0.0)


def test_six_fields_but_no_kings():
    empty = "8/8/8/8/8/8/8/8 w - - 0 1"
    assert chess.Board(empty).status() != chess.STATUS_VALID
    check(both(empty, empty), status=INVALID, validity=0.5, similarity=1.0, exact=1.0)
    assert both(empty, empty).total == 0.875


def test_side_not_to_move_in_check_is_invalid_even_as_exact_hit():
    assert chess.Board(WRONG_SIDE_IN_CHECK).status() & chess.STATUS_OPPOSITE_CHECK
    check(
        both(WRONG_SIDE_IN_CHECK, WRONG_SIDE_IN_CHECK),
        status=INVALID,
        validity=0.5,
        similarity=1.0,
        exact=1.0,
    )


def test_unicode_junk_shares_nothing_with_the_target():
    check(both("♔♕中文😀", AFTER_E4), status=UNPARSABLE, validity=0.0, similarity=0.0, exact=0.0)


def test_nul_bytes():
    check(both("\x00\x00\x00", AFTER_E4), status=UNPARSABLE, validity=0.0, similarity=0.0, exact=0.0)
    # NUL is not whitespace: it survives strip and spoils the fullmove number; the position reads
    check(both(AFTER_E4 + "\x00", AFTER_E4), status=INVALID, validity=0.5, similarity=1 - 1 / 59, exact=0.0)


def test_lone_surrogates():
    check(both("\ud800", AFTER_E4), status=UNPARSABLE, validity=0.0, similarity=0.0, exact=0.0)
    spoiled = AFTER_E4[:10] + "\udfff" + AFTER_E4[10:]
    check(both(spoiled, AFTER_E4), status=UNPARSABLE, validity=0.0, similarity=1 - 1 / 59, exact=0.0)


@pytest.mark.parametrize("blank", ["", " ", "\n\t \r\n"])
def test_empty_and_whitespace_only(blank):
    check(both(blank, AFTER_E4), status=UNPARSABLE, validity=0.0, similarity=0.0, exact=0.0)


def test_empty_completion_against_empty_target_is_an_exact_hit():
    check(both("", ""), status=UNPARSABLE, validity=0.0, similarity=1.0, exact=1.0)


def test_100kb_string_is_too_long_with_every_component_zero():
    r = both("a" * 100_000, AFTER_E4)
    assert r.status == TOO_LONG and r.total == 0.0
    assert r.components == {"validity": 0.0, "similarity": 0.0, "exact": 0.0}
    assert "100000" in r.reason and "512" in r.reason


def test_length_is_checked_after_strip():
    padded = " " * 50_000 + AFTER_E4 + "\n" * 50_000
    assert both(padded, AFTER_E4).status == OK


def test_max_chars_boundary():
    scorer = FenScorer(RewardConfig(max_chars=58))
    assert scorer.score(AFTER_E4, AFTER_E4).status == OK
    assert scorer.score(AFTER_E4 + "x", AFTER_E4).status == TOO_LONG


@pytest.mark.parametrize(
    ("completion", "target", "which"),
    [(None, AFTER_E4, "completion"), (b"x", AFTER_E4, "completion"), ("x", 3, "target")],
)
def test_non_string_input_is_bad_input_not_an_exception(completion, target, which):
    r = score(completion, target)
    assert (r.status, r.total, r.components) == (BAD_INPUT, 0.0, {})
    assert which in r.reason and not r.usable
    assert score_batch([completion], [target]) == [r]


def test_weights_are_configurable():
    scorer = FenScorer(fen=FenRewardConfig(validity_weight=1.0, similarity_weight=0.0, exact_weight=2.0))
    assert scorer.score(BOARD_PART, AFTER_E4).total == 0.5
    assert scorer.score(AFTER_E4, AFTER_E4).total == 3.0


def test_totals_are_finite_floats():
    for c in ["", AFTER_E4, BOARD_PART, "junk", "x" * 600]:
        r = score(c, AFTER_E4)
        assert isinstance(r.total, float) and math.isfinite(r.total) and 0.0 <= r.total <= 1.0
