"""The two chess components: FEN validity tiers (python-chess) and Levenshtein similarity.

Tiers follow python-chess: `chess.Board(fen)` raising (ValueError, or anything else) is
`unparsable` (0.0) < parses but is not a valid six-field position is `invalid` (0.5) < `ok` (1.0).
Both functions expect the completion already stripped and capped in length by the caller.
"""

from __future__ import annotations

import chess
import Levenshtein

from rewards.result import INVALID, OK, UNPARSABLE

FEN_FIELDS = 6


def fen_validity(fen: str) -> tuple[float, str]:
    """Validity tier of a stripped string: (1.0, ok) | (0.5, invalid) | (0.0, unparsable)."""
    try:
        board = chess.Board(fen)
    except Exception:  # any refusal to parse counts as unparsable, never as a crash
        return 0.0, UNPARSABLE
    try:
        valid = len(fen.split()) == FEN_FIELDS and board.is_valid()
    except Exception:  # a parsed board that cannot be judged is not a valid one
        valid = False
    return (1.0, OK) if valid else (0.5, INVALID)


def similarity(completion: str, target: str) -> float:
    """1 - Levenshtein distance / longer length, in [0, 1]; 1.0 for two empty strings."""
    if completion == target:
        return 1.0  # skip the distance: it is 0
    longest = max(len(completion), len(target), 1)
    return 1.0 - Levenshtein.distance(completion, target) / longest
