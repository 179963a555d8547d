"""Sandbox tests: skipped as a whole where the sandbox cannot run; every test checks it left nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from sandbox_checks import leftover_cgroups, processes_in_own_cgroups

from rewards.sandbox import run_python, sandbox_unavailable_reason
from rewards.sandbox.warm import POOL


def pytest_collection_modifyitems(config, items):
    reason = sandbox_unavailable_reason()
    if reason is None:
        return
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.skip(reason=f"sandbox unavailable here: {reason}"))


@pytest.fixture
def clean_after():
    """After the test: a trivial program still runs (on the warm sandbox the test used, when it is
    still up), and once the warm sandboxes are closed no cgroup directory and no process of ours is left."""
    yield
    for fresh in (False, True):
        after = run_python("print('still fine')", fresh=fresh)
        assert (after.status, after.stdout) == ("ok", "still fine\n"), after
    POOL.close()
    assert leftover_cgroups() == []
    assert processes_in_own_cgroups() == []
