"""Section `sandbox`: isolated executions per second, warm sandbox against the two ways without one.

Three ways to run one program, each timed on the same programs in the same rounds, alternating:
- `warm`: `rewards.sandbox.run_python`, a child forked by a warm sandbox (what the code reward uses);
- `bwrap per execution`: `run_python(..., fresh=True)`, a new bubblewrap sandbox and interpreter;
- `plain subprocess`: `subprocess.run([python, file])`, a fresh interpreter with no isolation at all.
Two programs: a trivial one (`pass`) and one with 200 assert lines (what a test harness costs).
`warm (METHOD)` rows time the warm sandbox with its processes capped each way this host offers
(`SandboxLimits.process_limit`: cgroup_v1, cgroup_v2, uid); `warm` is the `auto` choice.
Each figure is executions per second over `executions` calls, the median of the rounds; a row for
the warm sandbox from two threads at once (two sandboxes, the machine's two cores) shows how it scales.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.results import add_table, new_section, set_headline
from bench.timing import median

TITLE = "9. Sandbox: isolated executions per second"
HEADLINE = ("sandbox_execs_per_s", "sandbox_vs_bwrap_per_exec", "sandbox_vs_plain")
PROGRAMS = {
    "trivial (`pass`)": "pass\n",
    "200 asserts": "x = 1\n" + "".join(f"assert x + {i} == {i + 1}\n" for i in range(200)),
}
WAYS = ("warm", "bwrap per execution", "plain subprocess")


@dataclass(frozen=True)
class SandboxPlan:
    executions: int = 200  # per timed call of the warm sandbox
    slow_executions: int = 40  # per timed call of the two ways that start an interpreter each time
    rounds: int = 5
    threads: int = 2


def _methods() -> tuple[str, ...]:
    from rewards.sandbox import sandbox_unavailable_reason

    return tuple(
        f"warm ({m})" for m in ("cgroup_v1", "cgroup_v2", "uid") if sandbox_unavailable_reason(m) is None
    )


def _runner(way: str, source: str, folder: str):
    from rewards.sandbox import SandboxLimits, run_python

    if way == "warm":
        return lambda: run_python(source)
    if way.startswith("warm ("):
        limits = SandboxLimits(process_limit=way[len("warm (") : -1])
        return lambda: run_python(source, limits=limits)
    if way == "bwrap per execution":
        return lambda: run_python(source, fresh=True)
    path = os.path.join(folder, f"program_{len(os.listdir(folder))}.py")
    with open(path, "w") as f:
        f.write(source)
    return lambda: subprocess.run([sys.executable, path], capture_output=True, check=False)


def _rate(run, calls: int, threads: int = 1) -> tuple[float, bool]:
    """(executions per second, whether every one ended as it should)."""
    began = time.perf_counter()
    if threads == 1:
        results = [run() for _ in range(calls)]
    else:
        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(lambda _: run(), range(calls)))
    elapsed = time.perf_counter() - began
    ok = all(getattr(r, "status", None) == "ok" or getattr(r, "returncode", None) == 0 for r in results)
    return calls / elapsed, ok


def bench_sandbox(plan: SandboxPlan) -> dict[str, Any]:
    from rewards.sandbox import sandbox_unavailable_reason

    section = new_section("sandbox", TITLE, owns=HEADLINE)
    reason = sandbox_unavailable_reason()
    if reason is not None:
        section["status"] = "skipped"
        for key in HEADLINE:
            set_headline(section, key, None, f"no sandbox here: {reason}")
        return section
    rates: dict[tuple[str, str], list[float]] = {}
    failures: list[str] = []
    ways_here = (*WAYS, *_methods())
    with tempfile.TemporaryDirectory() as folder:
        runners = {(p, w): _runner(w, src, folder) for p, src in PROGRAMS.items() for w in ways_here}
        for run in runners.values():  # warm-up: the first warm sandbox, the page cache
            run()
        for round_index in range(plan.rounds):
            ways = ways_here if round_index % 2 == 0 else tuple(reversed(ways_here))
            for program in PROGRAMS:
                for way in ways:
                    calls = plan.executions if way.startswith("warm") else plan.slow_executions
                    rate, ok = _rate(runners[(program, way)], calls)
                    rates.setdefault((program, way), []).append(rate)
                    if way == "warm" and plan.threads > 1:
                        rate, threaded_ok = _rate(runners[(program, way)], calls, plan.threads)
                        rates.setdefault((program, f"warm, {plan.threads} threads"), []).append(rate)
                        ok = ok and threaded_ok
                    if not ok:
                        failures.append(f"{program} / {way}, round {round_index}")
    medians = {key: median(values) for key, values in rates.items()}
    rows = []
    for program in PROGRAMS:
        plain = medians[(program, "plain subprocess")]
        bwrap = medians[(program, "bwrap per execution")]
        for way in (*ways_here, f"warm, {plan.threads} threads"):
            if (program, way) in medians:
                rate = medians[(program, way)]
                rows.append([program, way, rate, 1000 / rate, rate / bwrap, rate / plain])
    add_table(
        section,
        f"Executions per second (median of {plan.rounds} rounds, ways alternating)",
        ["program", "way", "executions/s", "ms each", "vs bwrap per execution", "vs plain subprocess"],
        rows,
    )
    section["data"] = {"rates": {f"{p} | {w}": v for (p, w), v in rates.items()}, "failures": failures}
    if failures:
        section["notes"].append(f"executions that did not end `ok`: {failures}")
    trivial = "trivial (`pass`)"
    warm = medians[(trivial, "warm")]
    set_headline(section, "sandbox_execs_per_s", warm)
    set_headline(section, "sandbox_vs_bwrap_per_exec", warm / medians[(trivial, "bwrap per execution")])
    set_headline(section, "sandbox_vs_plain", warm / medians[(trivial, "plain subprocess")])
    return section
