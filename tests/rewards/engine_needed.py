"""Skip marker for tests that need a chess engine binary (Stockfish)."""

from __future__ import annotations

import pytest

from rewards.engine import EngineUnavailable, find_engine


def _engine_missing() -> str | None:
    try:
        find_engine(None)
    except EngineUnavailable as exc:
        return str(exc)
    return None


MISSING = _engine_missing()
needs_engine = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
