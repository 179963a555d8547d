"""When pool.placement=auto measures both sides again: only when the side not chosen may now be the
cheaper one (no Ray: the costs are fed to the rule as its steps would book them)."""

from __future__ import annotations

import pytest

from actors.pool.placement import PROBE, PlacedRewards
from rewards import FenScorer


@pytest.fixture
def placed():
    placed = PlacedRewards(pool=None, scorer=FenScorer(), mode="auto", log=lambda line: None)
    yield placed
    placed.shutdown()


def _step(placed: PlacedRewards, ms_per_item: float, items: int = 64) -> str:
    """Book one step of `items` at `ms_per_item` on the side in use; the side the next step takes."""
    placed._spent = ms_per_item * items / 1e3
    placed._observe(items)
    return placed.where


def _decided(placed: PlacedRewards, inline_ms: float, pool_ms: float) -> None:
    for side in PROBE:
        _step(placed, inline_ms if side == "inline" else pool_ms)


def test_a_cheap_inline_reward_is_not_sent_back_to_the_pool_by_noise(placed):
    _decided(placed, inline_ms=0.015, pool_ms=0.14)
    assert placed.where == "inline" and len(placed.decisions) == 1
    assert _step(placed, 0.04) == "inline"  # 2.7x its cost, still far below the pool's
    assert _step(placed, 0.009) == "inline"  # cheaper, but not by RECHECK_RATIO
    assert _step(placed, 0.2) == PROBE[0]  # now dearer than the pool was: both measured again


def test_a_pool_that_got_much_cheaper_or_dearer_is_measured_again(placed):
    _decided(placed, inline_ms=1.0, pool_ms=0.5)
    assert placed.where == "pool"
    assert _step(placed, 0.9) == "pool"  # 1.8x, below what inline cost
    assert _step(placed, 1.2) == PROBE[0]  # past both RECHECK_RATIO and inline's cost
    _decided(placed, inline_ms=1.0, pool_ms=0.5)
    assert _step(placed, 0.2) == PROBE[0]  # fell below half: inline may have fallen further
