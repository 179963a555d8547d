"""The layout keeps its promises: imports run one way, benchmarks live in bench/ and nothing imports them,
one schedule."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("rewards", "trainer", "actors", "service")
BENCH = "bench"  # the benchmarks: may import every package; no package imports them

# What each package may import, of ours and of the heavy third parties (DESIGN's table).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "rewards": ("trainer", "actors", "service", BENCH, "torch", "ray"),
    "trainer": ("rewards", "actors", "service", BENCH, "ray"),
    "actors": ("service", BENCH),
    "service": (BENCH,),
}


def _modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_run_one_way(package):
    bad = {
        str(path.relative_to(REPO)): sorted(_imported(path) & set(FORBIDDEN[package]))
        for path in _modules(package)
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_every_package_folder_is_a_package():
    for package in (*PACKAGES, BENCH):
        for folder in [REPO / package, *(p for p in (REPO / package).rglob("*") if p.is_dir())]:
            if folder.name != "__pycache__" and any(folder.glob("*.py")):
                assert (folder / "__init__.py").exists(), f"{folder} has modules but no __init__.py"


def test_benchmarks_live_in_bench_and_the_service_runs_them_by_name():
    stray = [
        str(p.relative_to(REPO))
        for package in PACKAGES
        for p in _modules(package)
        if "bench" in p.name or "workload" in p.name
    ]
    # service/bench.py is the launcher of `python -m service.bench`: it runs bench by name, importing nothing
    assert stray == ["service/bench.py"]
    out = subprocess.run(
        [sys.executable, "-m", "service.bench", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "usage: python -m bench" in out.stdout and "--sections" in out.stdout


def test_the_run_total_is_computed_in_the_schedule_alone():
    pattern = "sft" + ".steps + "  # in two pieces, so this file does not match itself
    out = subprocess.run(
        ["grep", "-rn", pattern, "--include=*.py", "."], cwd=REPO, capture_output=True, text=True
    ).stdout
    hits = [line for line in out.splitlines() if not line.startswith("./trainer/schedule.py")]
    assert hits == []


def test_one_config_base_everywhere():
    from actors.pool.config import PoolConfig
    from rewards.config import RewardConfig
    from service.config import ServiceConfig
    from trainer.config_base import Frozen

    assert Frozen.model_config["allow_inf_nan"] is False
    for model in (PoolConfig, ServiceConfig):
        assert issubclass(model, Frozen)
    # rewards/ imports nothing of ours, so it repeats the settings; they must stay equal.
    assert RewardConfig.model_config == Frozen.model_config


def test_a_config_is_validated_without_importing_torch_or_ray():
    code = (
        "import sys; from service.config import load_config; load_config('demo'); "
        "print(sorted(m for m in ('torch', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"  # a bad config is refused in well under a second
