"""The fen task's reward: FEN validity tiers (the FEN rules and python-chess), Levenshtein similarity
and exact match, weighted (`FenRewardConfig`), plus any user rewards.

    FenScorer(RewardConfig(), FenRewardConfig(validity_weight=0.25)).score(completion, target_fen)
    score(completion, target_fen)      # the default config (`from rewards import score`)

Tiers (docs/concepts.md, "FEN validity tiers", is the one table of them):
- `unparsable` (0.0): python-chess cannot read the position: the placement, side to move,
  castling letters (in any order) or en-passant field of the first four fields raise;
- `invalid` (0.5): the position is read, but the string is not the FEN of a legal position:
  not exactly six fields, castling not `-` or an ordered subset of `KQkq`, counters that are not
  integers or are impossible (fullmove < 1, a half-move clock above the plies played), or
  python-chess's `status()` is not `STATUS_VALID` (kings, pawns on the back rank, a check by the
  side to move, an en-passant square without a double push, castling rights without the pieces);
- `ok` (1.0): all of it holds.
Both functions expect the completion already stripped and capped in length by the caller (the
scorer does both, `rewards.scorer`). `score_batch` memoises the validity tier of repeated completions
(an exact hit shares its entry with the target, so the target is parsed once per batch, not once per
completion) in a bounded LRU that lives as long as the scorer.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import chess
import Levenshtein

from rewards.config import FenRewardConfig, RewardConfig
from rewards.result import INVALID, OK, UNPARSABLE, ScoreResult
from rewards.scorer import Part, RewardComponent, Scorer
from rewards.user_reward import Fields

FEN_FIELDS = 6
CASTLING_ORDER = "KQkq"


def _castling_letters_in_order(field: str) -> str | None:
    """The castling field with its letters in KQkq order; None when it holds another character or a repeat."""
    if field == "-":
        return field
    if not field or any(c not in CASTLING_ORDER for c in field) or len(set(field)) != len(field):
        return None
    return "".join(c for c in CASTLING_ORDER if c in field)


def _counters_possible(fields: list[str]) -> bool:
    """Half-move clock and fullmove number: integers, fullmove >= 1, clock <= plies played so far."""
    try:
        halfmove, fullmove = int(fields[4]), int(fields[5])
    except ValueError:
        return False
    plies_played = 2 * (fullmove - 1) + (fields[1] == "b")
    return fullmove >= 1 and 0 <= halfmove <= plies_played


def fen_validity(fen: str) -> tuple[float, str]:
    """Validity tier of a stripped string: (1.0, ok) | (0.5, invalid) | (0.0, unparsable)."""
    fields = fen.split()
    castling = _castling_letters_in_order(fields[2]) if len(fields) > 2 else ""
    if not fields or castling is None:
        return 0.0, UNPARSABLE
    position = fields[:2] + ([castling] if castling else []) + fields[3:4]
    try:
        board = chess.Board(" ".join(position))  # counters are judged below, by the FEN rules
    except Exception:  # any refusal to parse counts as unparsable, never as a crash
        return 0.0, UNPARSABLE
    if len(fields) != FEN_FIELDS or castling != fields[2] or not _counters_possible(fields):
        return 0.5, INVALID
    try:
        valid = board.status() == chess.STATUS_VALID
    except Exception:  # a parsed board that cannot be judged is not a valid one
        valid = False
    return (1.0, OK) if valid else (0.5, INVALID)


def similarity(completion: str, target: str) -> float:
    """1 - Levenshtein distance / longer length, in [0, 1]; 1.0 for two empty strings."""
    if completion == target:
        return 1.0  # skip the distance: it is 0
    longest = max(len(completion), len(target), 1)
    return 1.0 - Levenshtein.distance(completion, target) / longest


class FenValidity(RewardComponent):
    """`validity`: the tier of `fen_validity`, which also gives the item its status."""

    name = "validity"

    def __init__(self, cache_size: int = FenRewardConfig().cache_size):
        self.cache_size = cache_size
        self._start()

    def _start(self) -> None:
        size = self.cache_size
        self._memo = functools.lru_cache(maxsize=size)(fen_validity) if size else fen_validity

    def __getstate__(self) -> dict[str, Any]:
        return {"cache_size": self.cache_size}  # the LRU wrapper cannot be pickled: rebuilt empty

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.cache_size = state["cache_size"]
        self._start()

    @staticmethod
    def _part(tier: tuple[float, str]) -> Part:
        validity, status = tier
        return Part({"validity": validity}, validity, status)

    def judge(self, completion: str, target: Any, fields: Fields) -> Part:
        return self._part(fen_validity(completion))

    def judge_in_batch(self, completion: str, target: Any, fields: Fields) -> Part:
        return self._part(self._memo(completion))

    def cache_info(self) -> dict[str, int]:
        """Hits, misses and current size of the memo (all 0 when it is disabled)."""
        info = getattr(self._memo, "cache_info", None)
        if info is None:
            return {"hits": 0, "misses": 0, "size": 0}
        ci = info()
        return {"hits": ci.hits, "misses": ci.misses, "size": ci.currsize}


class Similarity(RewardComponent):
    """`similarity`: 1 - Levenshtein distance to the target / the longer length."""

    name = "similarity"
    needs_target = True

    def judge(self, completion: str, target: Any, fields: Fields) -> Part:
        value = similarity(completion, target)
        return Part({"similarity": value}, value)


class ExactMatch(RewardComponent):
    """`exact`: 1 when the completion is the target, else 0."""

    name = "exact"
    needs_target = True

    def judge(self, completion: str, target: Any, fields: Fields) -> Part:
        value = 1.0 if completion == target else 0.0
        return Part({"exact": value}, value)


class FenScorer(Scorer):
    """The fen task's scorer: validity, similarity and exact match, weighted, plus the user rewards."""

    def __init__(self, config: RewardConfig | None = None, fen: FenRewardConfig | None = None):
        """fen: the weights and the validity memo's size (the fen task's section holds them)."""
        fen = fen if fen is not None else FenRewardConfig()
        self.validity = FenValidity(fen.cache_size)
        parts = [
            (self.validity, fen.validity_weight),
            (Similarity(), fen.similarity_weight),
            (ExactMatch(), fen.exact_weight),
        ]
        super().__init__(parts, config, data_source="fen")

    def cache_info(self) -> dict[str, int]:
        """Hits, misses and current size of the validity memo (all 0 when it is disabled)."""
        return self.validity.cache_info()


def build_scorer(config: RewardConfig | Mapping[str, Any] | None = None) -> FenScorer:
    """The fen scorer with default weights from a config, a plain mapping of config fields, or None."""
    if config is not None and not isinstance(config, RewardConfig):
        config = RewardConfig.model_validate(config)
    return FenScorer(config)


@functools.cache
def default_scorer() -> FenScorer:
    """The process-wide fen scorer with the default config (built on first use, not at import)."""
    return FenScorer()


def score(completion: Any, target: Any) -> ScoreResult:
    """Score one completion against a target FEN with the default config."""
    return default_scorer().score(completion, target)


def score_batch(completions: Iterable[Any], targets: Iterable[Any]) -> list[ScoreResult]:
    """Score a batch against target FENs with the default config (memoised fast path)."""
    return default_scorer().score_batch(completions, targets)


def score_totals(completions: Iterable[Any], targets: Iterable[Any]) -> list[float]:
    """The total reward of each completion against its target FEN (the default config): what an
    in-process reward source hands the trainer."""
    return [result.total for result in score_batch(completions, targets)]
