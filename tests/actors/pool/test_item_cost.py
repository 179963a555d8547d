"""How far a submission spreads at the workers' measured cost per item (no Ray)."""

from __future__ import annotations

import math

import pytest

from actors.pool.item_cost import ItemCost
from actors.pool.work import plan_chunks


def test_before_any_call_the_minimum_chunk_alone_decides():
    assert ItemCost().min_piece(32, 0.002) == 32


def test_a_cheap_reward_is_not_cut_into_calls_that_cost_more_than_its_scoring():
    cost = ItemCost()
    cost.add(busy_s=64 * 6e-6, items=64)  # 6 us an item: 64 items score in 0.4 ms
    piece = cost.min_piece(32, 0.002)
    assert piece == math.ceil(0.002 / 6e-6)
    assert plan_chunks(64, 2048, piece, 2) == [(0, 64)]  # one call where min_chunk_size alone makes two
    assert plan_chunks(64, 2048, 32, 2) == [(0, 32), (32, 64)]
    assert len(plan_chunks(4096, 2048, piece, 2)) == 2  # a big submission still reaches every worker


def test_a_costly_reward_keeps_the_minimum_chunk():
    cost = ItemCost()
    cost.add(busy_s=32 * 0.005, items=32)  # 5 ms an item
    assert cost.min_piece(32, 0.002) == 32
    assert plan_chunks(64, 2048, cost.min_piece(32, 0.002), 2) == [(0, 32), (32, 64)]


def test_the_mean_follows_a_change_of_cost_and_ignores_calls_it_cannot_use():
    cost = ItemCost()
    cost.add(0.010, 10)
    assert cost.seconds_per_item == pytest.approx(1e-3)
    for busy_s, items in ((1.0, 0), (float("nan"), 5), (-1.0, 5)):
        cost.add(busy_s, items)
    assert cost.seconds_per_item == pytest.approx(1e-3)
    cost.add(0.030, 10)  # the reward got three times slower
    assert cost.seconds_per_item == pytest.approx(1.5e-3)
    for _ in range(20):
        cost.add(0.030, 10)
    assert cost.seconds_per_item == pytest.approx(3e-3, rel=0.01)


def test_zero_turns_the_rule_off_and_free_items_never_spread():
    cost = ItemCost()
    cost.add(1e-6, 1000)
    assert cost.min_piece(16, 0.0) == 16
    cost.seconds_per_item = 0.0
    assert plan_chunks(10_000, 4096, cost.min_piece(16, 0.002), 4) == plan_chunks(10_000, 4096, 10_000, 1)
