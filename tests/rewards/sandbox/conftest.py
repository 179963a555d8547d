"""Sandbox tests: skipped as a whole where the sandbox cannot run; every test checks it left nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from sandbox_checks import leftover_cgroups, processes_in_own_cgroups

from rewards.sandbox import run_python, sandbox_unavailable_reason


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
    """After the test: no cgroup directory, no process of ours in one, and a trivial program still runs."""
    yield
    assert leftover_cgroups() == []
    assert processes_in_own_cgroups() == []
    after = run_python("print('still fine')")
    assert (after.status, after.stdout) == ("ok", "still fine\n"), after
    assert leftover_cgroups() == []
