from collections import Counter

import pytest

from bench.workload import MIX, realistic_completions
from rewards import TOO_LONG, FenScorer

TARGETS = [
    "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1",
    "rnbqkbnr/pppp1ppp/8/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R b KQkq - 1 2",
] * 1000  # two prompts, many completions each


def test_deterministic_per_seed():
    assert realistic_completions(TARGETS, seed=7) == realistic_completions(TARGETS, seed=7)
    assert realistic_completions(TARGETS, seed=7) != realistic_completions(TARGETS, seed=8)


def test_one_completion_per_target_with_the_expected_mix():
    completions = realistic_completions(TARGETS, seed=0)
    assert len(completions) == len(TARGETS)
    exact = sum(c == t for c, t in zip(completions, TARGETS, strict=True)) / len(TARGETS)
    # exact hits come from the `exact` kind, plus repeats of exact hits and rare no-op edits
    assert MIX["exact"] - 0.03 < exact < MIX["exact"] + MIX["repeat"] + 0.03
    statuses = Counter(r.status for r in FenScorer().score_batch(completions, TARGETS))
    assert {"ok", "invalid", "unparsable", TOO_LONG} <= set(statuses)


def test_only_junk_never_hits():
    completions = realistic_completions(TARGETS[:200], seed=1, mix={"junk": 1.0})
    assert not any(c == t for c, t in zip(completions, TARGETS[:200], strict=True))


def test_bad_mix_is_rejected():
    with pytest.raises(ValueError, match="unknown completion kinds"):
        realistic_completions(TARGETS, mix={"garbage": 1.0})
    with pytest.raises(ValueError, match="positive sum"):
        realistic_completions(TARGETS, mix={"junk": 0.0})
