"""Properties: scoring never raises, totals are finite and in [0, 1], and the fast batch path
returns exactly what the reference `score` returns, item by item."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewards import STATUSES, FenRewardConfig, FenScorer, RewardConfig

REAL_FENS = [
    "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
    "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1",
    "rnbqkbnr/pppp1ppp/8/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R b KQkq - 1 2",
    "r1bqkb1r/pppp1ppp/2n2n2/4p2Q/2B1P3/8/PPPP1PPP/RNB1K1NR w KQkq - 4 4",
    "4k3/8/8/8/8/8/8/4K2r b - - 0 1",  # parses, not valid
    "8/8/8/8/8/8/8/8 w - - 0 1",  # no kings
]

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

any_text = st.text(st.characters(exclude_categories=[]), max_size=80)  # lone surrogates included
FEN_ALPHABET = "pnbrqkPNBRQK12345678/ wb-KQkqabcdefgh0123456789"
fen_like = st.text(st.sampled_from(FEN_ALPHABET), max_size=80)


@st.composite
def edited_fen(draw):
    """A real FEN with a few characters replaced, inserted or deleted."""
    chars = list(draw(st.sampled_from(REAL_FENS)))
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(chars)))
        new = draw(st.sampled_from(FEN_ALPHABET + "\x00\ud800"))
        op = draw(st.sampled_from(["sub", "ins", "del"]))
        if op == "ins" or i == len(chars):
            chars.insert(i, new)
        elif op == "sub":
            chars[i] = new
        else:
            del chars[i]
    return "".join(chars)


completions = st.one_of(
    st.sampled_from(REAL_FENS),
    edited_fen(),
    fen_like,
    any_text,
    st.text(st.sampled_from(" \t\n\r\x0b\x0c"), max_size=5),
    st.builds(lambda c, n: c * n, st.sampled_from(["a", " ", "8/"]), st.integers(400, 2_000)),
)
targets = st.one_of(st.sampled_from(REAL_FENS), any_text)


@SETTINGS
@given(completion=completions, target=targets)
def test_score_never_raises_and_total_is_in_unit_interval(completion, target):
    r = FenScorer().score(completion, target)
    assert r.status in STATUSES
    assert math.isfinite(r.total) and 0.0 <= r.total <= 1.0
    assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in r.components.values())


@st.composite
def batches(draw):
    """Pairs drawn from small pools so that completions repeat and exact hits are common."""
    pool = draw(st.lists(completions, min_size=1, max_size=6))
    n = draw(st.integers(0, 40))
    out_c, out_t = [], []
    for _ in range(n):
        target = draw(st.sampled_from(REAL_FENS))
        kind = draw(st.sampled_from(["exact", "pool", "fresh"]))
        out_c.append(
            target
            if kind == "exact"
            else draw(st.sampled_from(pool))
            if kind == "pool"
            else draw(completions)
        )
        out_t.append(target)
    return out_c, out_t


@pytest.mark.parametrize("cache_size", [0, 2, 65536])
def test_score_batch_equals_score_item_by_item(cache_size):
    scorer = FenScorer(RewardConfig(max_chars=300), FenRewardConfig(cache_size=cache_size))

    @SETTINGS
    @given(batch=batches())
    def check(batch):
        cs, ts = batch
        assert scorer.score_batch(cs, ts) == [scorer.score(c, t) for c, t in zip(cs, ts, strict=True)]

    check()  # one scorer for all examples: its memo carries over between batches, as in a worker


def test_score_batch_memoises_repeats():
    scorer = FenScorer()
    fen = REAL_FENS[2]
    scorer.score_batch([fen, fen, "x", "x"], [fen, REAL_FENS[0], fen, fen])
    assert scorer.cache_info() == {"hits": 2, "misses": 2, "size": 2}
    scorer.score_batch([fen], [fen])
    assert scorer.cache_info()["hits"] == 3


def test_cache_is_bounded():
    scorer = FenScorer(fen=FenRewardConfig(cache_size=3))
    scorer.score_batch([f"junk{i}" for i in range(10)], [REAL_FENS[0]] * 10)
    assert scorer.cache_info()["size"] == 3


def test_score_batch_checks_lengths_and_types():
    scorer = FenScorer()
    with pytest.raises(ValueError, match="got 2 completions and 1 targets"):
        scorer.score_batch(["a", "b"], ["a"])
    with pytest.raises(TypeError, match="completions must be a sequence of str"):
        scorer.score_batch("ab", ["a", "b"])
    assert scorer.score_batch((c for c in ["a"]), ("a",)) == [scorer.score("a", "a")]
    assert scorer.score_batch([], []) == []
