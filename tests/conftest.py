"""Suite-wide plugins: the test tiers (`tiers.py`) and the thread guard (`thread_guard.py`)."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest
import tiers
from hypothesis import settings

# The suite runs several processes on the machine's cores at once (xdist workers, Ray, whole runs):
# a node shared with other work, which is what OpenMP's passive wait is for. Set before anything
# loads torch; `scaling.omp_wait_policy: auto` keeps what it finds here, and a test of the default
# rule takes these out of its run's environment.
SUITE_WAIT_POLICY = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
for _name, _value in SUITE_WAIT_POLICY.items():
    os.environ.setdefault(_name, _value)

# Figures of the machine that `auto` choices time (`trainer.machine_figures`) are kept in a file of
# the suite's own instead of the user's cache: every run of the suite on one machine then decides
# alike, and nothing is written to the home directory.
os.environ.setdefault(
    "GRPO_MACHINE_FIGURES",
    os.path.join(tempfile.gettempdir(), f"grpo-suite-machine-figures-{os.getuid()}.json"),
)

# Property tests (Hypothesis) draw new examples on every run here, to find what no one wrote down;
# under `.ci/run` (HYPOTHESIS_PROFILE=ci) they draw the same ones each time, so a run that lands
# is decided by the code, not by the draw. A failure prints the example to reproduce it.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

pytest_plugins = ["thread_guard"]  # its hooks: per test, which threads started; at exit, the leaked ones


def pytest_configure(config: pytest.Config) -> None:
    tiers.register(config)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.assign(items)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    tiers.stop_after_a_failing_tier(item, nextitem)
    if tiers.last_of_its_tier(item, nextitem):
        _stop_the_shared_ray_head()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _stop_the_shared_ray_head()


def _stop_the_shared_ray_head() -> None:
    """The whole runs' shared Ray head (`tests/service/train_child.py`), if one was started: at the
    end of the tier that used it (idle, it costs about 4 CPU-seconds a minute) or of the session."""
    if (train_child := sys.modules.get("tests.service.train_child")) is not None:
        train_child.stop_shared_head()


@pytest.fixture(autouse=True)
def _compile_workers_released():
    """A test that compiled leaves inductor's worker pool behind (non-daemon threads that only
    torch's exit handler stops): shut it down with the test that started it."""
    yield
    if "torch._inductor.async_compile" in sys.modules:
        from trainer.compile import release_compile_workers

        release_compile_workers()


@pytest.fixture(autouse=True)
def _unit_tests_start_no_ray(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    tiers.refuse_ray_in_unit(request.node, monkeypatch)
