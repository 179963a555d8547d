"""The test tiers: every test gets exactly one tier marker, assigned here, in one place.

| tier     | what runs                                                          | command                     |
|----------|--------------------------------------------------------------------|-----------------------------|
| `unit`   | pure code: no Ray, no whole run (small subprocesses are allowed)   | `pytest -m unit`            |
| `ray`    | a real local Ray cluster (`ray.init`, `ray start --head`), no run  | `pytest -m ray`             |
| `e2e`    | whole runs of `python -m service.train`, in process or as a child  | `pytest -m e2e`             |
| `faults` | runs that are killed, starved or fed garbage (`tests/faults/`)     | `pytest -m faults`          |
| `soak`   | runs kept going to watch something grow (memory, time)             | `pytest -m soak`            |

A test's tier is, in order: a tier marker it carries itself; its module's entry in `MODULE_TIERS`;
`ray` when it uses a fixture that starts Ray (`RAY_FIXTURES`, looked up through the whole fixture
closure); else `unit`. A `unit` test that calls `ray.init` fails, naming this file, so a test that
grows a cluster cannot hide in the fast tier.

`python -m pytest` runs every tier, fastest first (the order of `TIERS`); when a tier has
failures, the slower tiers are not started (the session stops with a line saying so).
"""

from __future__ import annotations

import pytest

TIERS = ("unit", "ray", "e2e", "faults", "soak")

# Whole modules of one tier (paths relative to tests/). Modules not named here hold unit tests,
# ray tests found by their fixtures, and tests marked one by one.
MODULE_TIERS: dict[str, str] = {
    "faults/test_faults_checkpoint_write.py": "faults",
    "faults/test_faults_inputs.py": "faults",
    "faults/test_faults_nodes.py": "faults",
    "faults/test_faults_resume.py": "faults",
    "faults/test_faults_storage.py": "faults",
    "faults/test_faults_workers.py": "faults",
    "faults/test_faults_episodes.py": "faults",
    "faults/test_faults_pool_autoscale.py": "faults",
    "faults/test_faults_memory.py": "soak",
    "actors/pool/test_move_pool.py": "ray",
    "actors/pool/test_placement.py": "ray",
    "actors/pool/test_pool_faults.py": "ray",
    "actors/pool/test_pool_waiting_rewards.py": "ray",
    "actors/pool/test_pool_watch.py": "ray",
    "actors/pool/test_reward_pool.py": "ray",
    "service/test_train_smoke.py": "e2e",
    "service/test_train_hf.py": "e2e",
    "service/test_train_text.py": "e2e",
    "service/test_console_run.py": "e2e",
    "service/test_move_task.py": "e2e",
    "service/test_client_cluster.py": "e2e",
    "service/test_client_address.py": "e2e",
    "service/test_resume_finished.py": "e2e",
    "service/test_dashboard.py": "ray",
    "bench/test_bench.py": "ray",
}

# Fixtures that start a Ray cluster: a test that needs one (directly or through another fixture)
# is a `ray` test unless a marker or its module says more.
RAY_FIXTURES = frozenset({"ray_cluster", "ray_token_head", "local_ray", "metrics_cluster"})


def register(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: test tier (tests/tiers.py)")


def tier_of(item: pytest.Item) -> str:
    own = [m.name for m in item.iter_markers() if m.name in TIERS]
    if own:
        return own[0]  # the closest marker: a test's own before its module's
    module = item.path.relative_to(item.config.rootpath / "tests").as_posix()
    if module in MODULE_TIERS:
        return MODULE_TIERS[module]
    if RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "ray"
    return "unit"


def assign(items: list[pytest.Item]) -> None:
    """Mark every item with its tier and order the items fastest tier first (stable within a tier)."""
    for item in items:
        tier = tier_of(item)
        item.stash[TIER_KEY] = tier
        if not item.get_closest_marker(tier):
            item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=lambda item: TIERS.index(item.stash[TIER_KEY]))


TIER_KEY = pytest.StashKey[str]()


def last_of_its_tier(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """True when `item` is the last test of its tier in this session (or the last test)."""
    return nextitem is None or item.stash.get(TIER_KEY, None) != nextitem.stash.get(TIER_KEY, None)


def stop_after_a_failing_tier(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """At a tier's end, a session with failures stops: slower tiers would only repeat the news."""
    if nextitem is None or item.session.testsfailed == 0:
        return
    if last_of_its_tier(item, nextitem):
        item.session.shouldstop = (
            f"{item.session.testsfailed} failed by the end of the {item.stash[TIER_KEY]!r} tier; "
            "the slower tiers were not started (run one with -m <tier>)"
        )


def refuse_ray_in_unit(item: pytest.Item, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test that starts Ray fails at once, naming where its tier is set."""
    if item.stash.get(TIER_KEY, None) != "unit":
        return
    import sys

    def refused(*args, **kwargs):
        raise RuntimeError(
            f"{item.nodeid} is in the unit tier but starts Ray: mark it `ray` or `e2e` "
            "(a marker on the test, or its module in tests/tiers.py MODULE_TIERS)"
        )

    if (ray := sys.modules.get("ray")) is not None:
        monkeypatch.setattr(ray, "init", refused)
    if (train_child := sys.modules.get("tests.service.train_child")) is not None:
        monkeypatch.setattr(train_child, "start_token_head", refused)  # the whole runs' shared head
