"""PoolConfig validation and the values derived from it (no Ray)."""

from __future__ import annotations

import pydantic
import pytest

from actors.pool.config import PoolConfig, max_runs_per_item, poison_item_bound_s, split_levels, worker_name


def test_defaults_are_valid_and_frozen():
    cfg = PoolConfig()
    assert (cfg.num_workers, cfg.cpus_per_worker, cfg.name_prefix) == (2, 0.5, "reward-worker")
    with pytest.raises(pydantic.ValidationError):
        cfg.num_workers = 3


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_workers": 0}, "num_workers"),
        ({"cpus_per_worker": 0}, "cpus_per_worker"),
        ({"chunk_timeout_s": -1}, "chunk_timeout_s"),
        ({"error_rate_threshold": 1.5}, "error_rate_threshold"),
        ({"split_parts": 1}, "split_parts"),
        ({"chunk_size": 8, "min_chunk_size": 16}, "min_chunk_size \\(16\\) must be <= chunk_size \\(8\\)"),
        ({"name_prefix": "has space"}, "name_prefix"),
        ({"chunk_timeout_s": float("inf")}, "chunk_timeout_s"),
        ({"workers": 2}, "workers"),
        ({"chunk_timeout_s": 100, "collect_timeout_s": 200}, "collect_timeout_s \\(200\\) must be >= 500"),
    ],
)
def test_bad_values_are_refused_naming_the_field(fields, message):
    with pytest.raises(pydantic.ValidationError, match=message):
        PoolConfig(**fields)


def test_worker_names_use_the_prefix():
    assert worker_name(PoolConfig(name_prefix="run7-rw"), 3) == "run7-rw-3"


@pytest.mark.parametrize(
    ("n", "parts", "levels"), [(1, 8, 0), (2, 2, 1), (16, 4, 2), (17, 4, 3), (1024, 8, 4)]
)
def test_split_levels(n, parts, levels):
    assert split_levels(n, parts) == levels


def test_a_poison_item_runs_a_bounded_number_of_times():
    cfg = PoolConfig(chunk_size=16, min_chunk_size=4, split_parts=4, max_retries=1, chunk_timeout_s=2.0)
    assert max_runs_per_item(cfg) == 1 + 2 + 1
    assert poison_item_bound_s(cfg, restart_s=3.0) == 4 * 5.0
    assert max_runs_per_item(cfg, chunk_len=1) == 2
