"""A trainer worker's CPU threads: how many torch uses, and how OpenMP's idle threads wait.

OpenMP's threads spin between parallel regions by default; on a machine where another process
wants the core (a reward worker, another job) a spinning thread holds it, and the worker slows
down several-fold. A passive wait policy puts idle threads to sleep instead. The policy is read
when the OpenMP runtime loads, so it must be in the environment of the process before torch is
imported: the driver sets it before starting a local Ray (whose workers inherit it); on a remote
cluster it belongs in the job's runtime_env.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trainer.engine import Trainer

WAIT_POLICY_ENV: dict[str, dict[str, str]] = {
    "passive": {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"},  # GNU and Intel OpenMP
    "active": {"OMP_WAIT_POLICY": "ACTIVE"},
    "inherit": {},
}
RECORDED_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "KMP_BLOCKTIME", "GOMP_SPINCOUNT")


def wait_policy_env(policy: str) -> dict[str, str]:
    """The environment variables that give OpenMP `policy` ('passive', 'active' or 'inherit')."""
    if policy not in WAIT_POLICY_ENV:
        raise ValueError(f"omp_wait_policy must be one of {sorted(WAIT_POLICY_ENV)}, got {policy!r}")
    return dict(WAIT_POLICY_ENV[policy])


def usable_cores() -> int:
    """Cores this process may run on (its affinity), which can be fewer than the machine has."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def default_threads(workers_on_node: int) -> int:
    """The node's cores shared among its trainer workers (at least one thread each).

    Reward workers are not counted: they are idle most of a step and, with the passive wait
    policy, take a core only while they score.
    """
    return max(1, usable_cores() // max(1, workers_on_node))


def apply_threads(threads: int | None, workers_on_node: int) -> dict[str, Any]:
    """Set torch's intra-op threads (`threads`, or the default); returns what the worker runs with."""
    torch.set_num_threads(threads if threads is not None else default_threads(workers_on_node))
    return {
        "torch_threads": torch.get_num_threads(),
        "usable_cores": usable_cores(),
        **{k: os.environ.get(k) for k in RECORDED_ENV},
    }


def thread_candidates(threads: int) -> list[int]:
    """1, 2, 4 .. below `threads`, and `threads`: the counts a worker times its decoding with."""
    counts, n = [], 1
    while n < threads:
        counts.append(n)
        n *= 2
    return [*counts, threads]


def choose_sampling_threads(trainer: Trainer, setting: int | None, prompt: str | None) -> dict[str, Any]:
    """Set `trainer.sampling_threads`: `setting` when given; else, on CPU with more than one torch
    thread, timed on the trainer's own policy with `prompt` (`trainer.sampling.decode_threads`).
    Returns what runtime.json records about it."""
    threads = torch.get_num_threads()
    if setting is not None:
        trainer.sampling_threads = setting
        return {"sampling_threads": setting, "sampling_threads_from": "scaling.sampling_threads"}
    if trainer.device.type != "cpu" or threads == 1 or not prompt:
        why = (
            "not CPU" if trainer.device.type != "cpu" else "one torch thread" if threads == 1 else "no prompt"
        )
        return {"sampling_threads": threads, "sampling_threads_from": f"torch_threads ({why})"}
    chosen = trainer.time_sampling_threads(prompt, thread_candidates(threads))
    return {**chosen.record(), "sampling_threads_from": "timed at start"}
