"""Chess in the report: board diagrams of FENs (python-chess draws SVG) and figures by game length.

A text that python-chess reads as a FEN is drawn; anything else is not a board, and the report
shows the text alone. The completion's board marks the squares where it differs from the target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import chess
import chess.svg

BOARD_PX = 150
_DIFF_FILL = "#d62728aa"  # squares whose piece differs from the target's


def parse_fen(text: Any) -> chess.Board | None:
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return chess.Board(text.strip())
    except ValueError:
        return None


def board_svg(fen: Any, against: Any = None) -> str | None:
    """An inline SVG of `fen` (None when it is not a FEN); squares unlike `against`'s are marked."""
    board = parse_fen(fen)
    if board is None:
        return None
    other = parse_fen(against)
    fill = {}
    if other is not None:
        fill = {sq: _DIFF_FILL for sq in chess.SQUARES if board.piece_at(sq) != other.piece_at(sq)}
    return chess.svg.board(board, size=BOARD_PX, fill=fill, coordinates=False)


def plies_of(prompt: Any) -> int | None:
    """Half-moves in a SAN move list such as `e4 e5 Nf3` (move numbers like `1.` are not plies)."""
    if not isinstance(prompt, str) or not prompt.strip():
        return None
    return sum(1 for token in prompt.split() if not token.rstrip(".").isdigit())


@dataclass(frozen=True)
class LengthRow:
    length: str
    count: int | None
    exact_match: float | None
    valid_rate: float | None
    reward_mean: float | None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _recorded(record: Mapping[str, Any]) -> list[LengthRow] | None:
    """Figures by length that the evaluation recorded itself (`by_<something>`: {length: {...}})."""
    for key, value in record.items():
        if key.startswith("by_") and isinstance(value, Mapping) and value:
            rows = []
            for length, figures in sorted(value.items(), key=lambda item: _sort_key(item[0])):
                figures = figures if isinstance(figures, Mapping) else {}
                count = _number(figures.get("count"))
                rows.append(
                    LengthRow(
                        str(length),
                        int(count) if count is not None else None,
                        _number(figures.get("exact_match")),
                        _number(figures.get("valid_rate")),
                        _number(figures.get("reward_mean")),
                    )
                )
            return rows
    return None


def _sort_key(length: Any) -> tuple[int, str]:
    text = str(length)
    digits = text.split("-")[0]
    return (int(digits) if digits.isdigit() else 10**9, text)


def _from_samples(samples: Sequence[Mapping[str, Any]]) -> list[LengthRow]:
    groups: dict[int, list[Mapping[str, Any]]] = {}
    for sample in samples:
        plies = plies_of(sample.get("prompt"))
        if plies is not None:
            groups.setdefault(plies, []).append(sample)
    rows = []
    for plies, group in sorted(groups.items()):
        rewards = [r for s in group if (r := _number(s.get("reward"))) is not None]
        statuses = [s.get("status") for s in group if "status" in s]
        rows.append(
            LengthRow(
                str(plies),
                len(group),
                sum(s.get("completion") == s.get("target") for s in group) / len(group),
                sum(status == "ok" for status in statuses) / len(statuses) if statuses else None,
                sum(rewards) / len(rewards) if rewards else None,
            )
        )
    return rows


def figures_by_length(record: Mapping[str, Any]) -> tuple[list[LengthRow], str]:
    """(rows, where they come from): the evaluation's own figures when it recorded them, else
    those of the sample completions it kept (a handful of positions, said so)."""
    recorded = _recorded(record)
    if recorded is not None:
        return recorded, "all held-out positions"
    samples = record.get("samples") or []
    return _from_samples(samples), f"the {len(samples)} sample completions kept"
