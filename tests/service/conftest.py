"""Fixtures for the service tests; the Ray head itself lives in `ray_head.py`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ray_head import RayHead, token_head


@pytest.fixture(scope="module")
def ray_token_head() -> Iterator[RayHead]:
    """A real `ray start --head` with RAY_AUTH_MODE=token, shared by one test module.

    Yields the dashboard address, the token and the node's metrics URL; teardown stops only
    this cluster.
    """
    with token_head(num_cpus=4) as head:
        yield head
