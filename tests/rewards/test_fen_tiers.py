"""FEN validity tiers: the FEN rules (six fields, KQkq order, possible counters) and python-chess's statuses."""

import pytest

from rewards.fen import fen_validity

START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR"
AFTER_E4 = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 1"


@pytest.mark.parametrize(
    ("fen", "tier"),
    [
        (f"{START} w KQkq - 0 1", "ok"),
        (AFTER_E4, "ok"),  # an en-passant square after any double push (python-chess would omit it)
        (f"{START} b KQkq - 1 1", "ok"),  # one ply played: a clock of 1 is possible
        (f"{START} w Kq - 0 1", "ok"),
        (f"{START} w KQkq - 0 1 extra", "invalid"),  # a seventh field: the position reads, the FEN is wrong
        (f"{START} w KQkq -", "invalid"),  # four fields: the same tier as seven
        (START, "invalid"),
        (f"{START} w qkQK - 0 1", "invalid"),  # castling letters out of KQkq order
        (f"{START} w KQkq - 0 0", "invalid"),  # fullmove 0
        (f"{START} w KQkq - 5 1", "invalid"),  # a half-move clock of 5 before any move
        (f"{START} w KQkq - x 1", "invalid"),
        (f"{START} w KQkq e3 0 1", "invalid"),  # python-chess: STATUS_INVALID_EP_SQUARE
        ("8/8/8/8/8/8/8/8 w - - 0 1", "invalid"),  # no kings
        (f"{START} w KQkk - 0 1", "unparsable"),  # a repeated castling letter
        (f"{START} w KQxq - 0 1", "unparsable"),
        ("rnbqkbnr/ppppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1", "unparsable"),  # nine squares
        ("", "unparsable"),
        ("hello", "unparsable"),
    ],
)
def test_tier(fen, tier):
    value, status = fen_validity(fen)
    assert status == tier and value == {"ok": 1.0, "invalid": 0.5, "unparsable": 0.0}[tier]


def test_a_user_reward_returning_none_skips_the_item(tmp_path, monkeypatch):
    import sys

    from rewards import SKIPPED, build_scorer

    (tmp_path / "skipper.py").write_text(
        "def judge(completion, target):\n    return None if 'x' in completion else 1.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("skipper", None)
    scorer = build_scorer({"user": [{"fn": "skipper:judge", "weight": 1.0}]})
    skipped, scored = scorer.score_batch(["x", START], [START, START])
    assert skipped.status == SKIPPED and not skipped.usable and "returned None" in skipped.reason
    assert scored.status == "invalid" and scored.usable


def test_score_totals_are_the_totals_of_the_scored_batch():
    from rewards import score_batch, score_totals

    completions, targets = [AFTER_E4, "x", f"{START} w KQkq - 0 1"], [AFTER_E4] * 3
    assert score_totals(completions, targets) == [r.total for r in score_batch(completions, targets)]
    assert score_totals(completions, targets)[0] > score_totals(completions, targets)[1]
