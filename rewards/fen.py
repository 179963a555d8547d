"""The two chess components: FEN validity tiers (the FEN rules and python-chess) and Levenshtein similarity.

Tiers (docs/concepts.md, "FEN validity tiers", is the one table of them):
- `unparsable` (0.0): python-chess cannot read the position: the placement, side to move,
  castling letters (in any order) or en-passant field of the first four fields raise;
- `invalid` (0.5): the position is read, but the string is not the FEN of a legal position:
  not exactly six fields, castling not `-` or an ordered subset of `KQkq`, counters that are not
  integers or are impossible (fullmove < 1, a half-move clock above the plies played), or
  python-chess's `status()` is not `STATUS_VALID` (kings, pawns on the back rank, a check by the
  side to move, an en-passant square without a double push, castling rights without the pieces);
- `ok` (1.0): all of it holds.
Both functions expect the completion already stripped and capped in length by the caller.
"""

from __future__ import annotations

import chess
import Levenshtein

from rewards.result import INVALID, OK, UNPARSABLE

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
