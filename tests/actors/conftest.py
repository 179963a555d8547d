"""A real local Ray cluster per test module, whose workers can import the test user rewards."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import ray

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.fixture(scope="module")
def ray_cluster():
    """`ray.init(num_cpus=4)` (logical CPUs may exceed the physical ones) for one module."""
    if ray.is_initialized():
        pytest.skip("another Ray session is already running in this process")
    # Workers import `user_rewards` (this folder) and the project packages from the checkout.
    path = os.pathsep.join(p for p in (str(HERE), str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        logging_level="ERROR",
        runtime_env={"env_vars": {"PYTHONPATH": path}},
        # Metrics reach the node's Prometheus endpoint within ~1 s instead of 10 s.
        _system_config={"metrics_report_interval_ms": 500},
    )
    try:
        yield
    finally:
        ray.shutdown()
