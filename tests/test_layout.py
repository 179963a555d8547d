"""The layout keeps its promises: imports run one way, benchmarks live in bench/ and nothing imports them,
one schedule."""

from __future__ import annotations

import ast
import graphlib
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


def _module_names() -> dict[str, Path]:
    """Every module of the packages and the benchmarks, by dotted name (a package by its own name)."""
    names = {}
    for package in (*PACKAGES, BENCH):
        for path in _modules(package):
            parts = path.relative_to(REPO).with_suffix("").parts
            names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _import_graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports, at module level or inside a function; an import of
    a name is an import of the module holding it (a submodule, else the package)."""
    modules = _module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def test_no_import_circle_among_the_projects_modules():
    """Two modules that import each other (inside functions too) are one room pretending to be two."""
    try:
        graphlib.TopologicalSorter(_import_graph()).prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"an import circle: {' -> '.join(exc.args[1])}")


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
