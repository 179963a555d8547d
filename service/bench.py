"""`python -m service.bench [--quick] [--sections ...] --out DIR`: the benchmark, run as `python -m bench`.

The benchmarks are tooling beside the service (the top-level `bench/` package), and the service
never imports them: this launcher runs `bench`'s main by module name, with the same arguments.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys

BENCH = "bench"


def main() -> None:
    if importlib.util.find_spec(BENCH) is None:
        sys.exit(
            "python -m service.bench: the package `bench` is not importable here; "
            "run it in a checkout of the project, where bench/ is beside service/"
        )
    runpy.run_module(BENCH, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
