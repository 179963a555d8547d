"""The OpenMP environment of a wait policy, without importing torch: the variables must be set
before the OpenMP runtime loads (with torch), so the places that set them cannot load it first.

`auto` (the default) keeps GNU OpenMP's own wait (a short spin, then sleep) unless the trainer
workers' threads on the node outnumber its cores: there each spinning thread holds a core another
trainer thread needs, and the passive wait (sleep at once) is several times faster. The run's own
reward workers do not count: scoring beside a spinning trainer measured faster than beside a
passive one, for rewards of 0.02, 1 and 5 ms of CPU per completion (`docs/benchmarks.md`). A
node shared with other jobs is the case for `passive`, which only the user knows of.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

WAIT_POLICY_ENV: dict[str, dict[str, str]] = {
    "passive": {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"},  # GNU and Intel OpenMP
    "active": {"OMP_WAIT_POLICY": "ACTIVE"},
    "inherit": {},
}


def usable_cores() -> int:
    """Cores this process may run on (its affinity), which can be fewer than the machine has."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def default_threads(workers_on_node: int, cores: int | None = None) -> int:
    """The node's cores shared among its trainer workers (at least one thread each)."""
    return max(1, (cores or usable_cores()) // max(1, workers_on_node))


def wait_policy_env(policy: str) -> dict[str, str]:
    """The environment variables that give OpenMP `policy` ('passive', 'active' or 'inherit')."""
    if policy not in WAIT_POLICY_ENV:
        raise ValueError(f"omp_wait_policy must be one of {sorted(WAIT_POLICY_ENV)}, got {policy!r}")
    return dict(WAIT_POLICY_ENV[policy])


def resolve_wait_policy(
    policy: str,
    *,
    workers_on_node: int,
    torch_threads: int | None,
    cores: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], str]:
    """(variables to set, why) for the trainer workers of one node under `policy` (or `auto`).

    `auto` leaves an OMP_WAIT_POLICY already in the environment as it is (the user's choice).
    """
    if policy != "auto":
        return wait_policy_env(policy), f"scaling.omp_wait_policy={policy}"
    environ = os.environ if environ is None else environ
    if environ.get("OMP_WAIT_POLICY"):
        return {}, f"auto: OMP_WAIT_POLICY={environ['OMP_WAIT_POLICY']} from the environment"
    cores = cores or usable_cores()
    each = torch_threads or default_threads(workers_on_node, cores)
    threads = each * max(1, workers_on_node)
    if threads > cores:
        return wait_policy_env("passive"), f"auto: {threads} trainer threads on {cores} cores: passive"
    return {}, f"auto: {threads} trainer threads on {cores} cores: OpenMP's own wait"


def cluster_wait_policy(scaling: Any) -> tuple[dict[str, str], str]:
    """On a cluster this process joined: the trainer workers' environment (their runtime_env) and
    why. A named policy is set there; `auto` and `inherit` leave the cluster's own environment,
    since the cores of the nodes the trainers will land on are not known here."""
    policy = scaling.omp_wait_policy
    if policy in ("passive", "active"):
        return wait_policy_env(policy), f"scaling.omp_wait_policy={policy} (the trainer workers' runtime_env)"
    return {}, f"{policy}: the cluster's environment (an OMP_WAIT_POLICY in the job's runtime_env decides)"


_APPLIED: dict[tuple[str, int, int | None], str] = {}  # what this process set, and why


def apply_wait_policy(scaling: Any) -> str:
    """Set `scaling.omp_wait_policy` (a ScalingConfig's) in this process's environment, for the
    trainer workers it starts on this node; why.

    Once per process (the in-process run sets it before torch loads, then starts its local Ray):
    a second call gives the first one's reason instead of reading back what the first one set.
    """
    key = (scaling.omp_wait_policy, scaling.num_workers, scaling.torch_threads)
    if key not in _APPLIED:
        env, why = resolve_wait_policy(
            key[0], workers_on_node=scaling.num_workers, torch_threads=scaling.torch_threads
        )
        os.environ.update(env)
        _APPLIED[key] = why
    return _APPLIED[key]
