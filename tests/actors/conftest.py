"""A real local Ray cluster for the Ray tests of this folder, whose workers can import the test user
rewards.

Those tests run one module after another (`tests/tiers.py` orders them by tier, then as collected),
so one cluster serves the modules in a row: the first starts it, and it stops after the last test
before an item that is not one of them (`pytest_runtest_teardown`), as each module's own cluster
stopped at its end. Starting and stopping a cluster costs about 4 s; every pool a test makes is
shut down by that test or its module, so a module finds the cluster's CPUs free.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import ray

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


_started: list[bool] = []  # [True] while the cluster started here runs


@pytest.fixture(scope="module")
def ray_cluster():
    """`ray.init(num_cpus=4)` (logical CPUs may exceed the physical ones), or the one a module before
    this one started."""
    if _started:
        yield
        return
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
    _started.append(True)
    yield


def _shares_the_cluster(item: pytest.Item | None) -> bool:
    return (
        item is not None and HERE in item.path.parents and "ray_cluster" in getattr(item, "fixturenames", ())
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """After the item's own teardown: stop the cluster unless the next item goes on with it (one in
    another module, or none: a module's fixture ends with its module)."""
    try:
        return (yield)
    finally:
        leaves_module = nextitem is None or nextitem.path != item.path
        if _started and leaves_module and not _shares_the_cluster(nextitem):
            _started.clear()
            ray.shutdown()
