"""A trainer worker's CPU threads: how many torch uses, and how it decodes.

How OpenMP's idle threads wait (a short spin, or sleep at once) is read when the OpenMP runtime
loads, so it is set in the environment before torch is imported: by the driver before it starts a
local Ray (whose workers inherit it), or in the trainer workers' runtime_env on a cluster it joins
(`actors.run.omp_env`, which chooses it). This module records what the worker got.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from actors.run.omp_env import default_threads, usable_cores

if TYPE_CHECKING:
    from trainer.engine import Trainer

RECORDED_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "KMP_BLOCKTIME", "GOMP_SPINCOUNT")


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


SMALL_DECODE_FLOP = 128e6  # a decode step below this (2 x parameters x rows) runs on one thread


def decode_step_flop(trainer: Trainer) -> float:
    """About 2 x parameters x rows: the FLOP of one decode step of a sampling micro-batch."""
    cfg = trainer.cfg.sampling
    params = sum(p.numel() for p in trainer.model.parameters())
    return 2.0 * params * cfg.prompts_per_microbatch * cfg.group_size


def choose_sampling_threads(
    trainer: Trainer, setting: int | str | None, prompt: str | None
) -> dict[str, Any]:
    """Set `trainer.sampler.threads` and return what runtime.json records about it.

    setting: a count; "auto": timed on the trainer's own policy with `prompt`
    (`trainer.sampling.decode_threads`: often faster, but the choice, and with it the last digits of
    the log-probs, can differ between runs); None: the rule, which gives the same choice every
    time: one thread for a small decode step (below SMALL_DECODE_FLOP) on CPU under the passive
    wait policy, where waking a sleeping thread for each of its small kernels costs more than the
    second core gives; else torch's threads.
    """
    threads = torch.get_num_threads()
    if isinstance(setting, int):
        trainer.sampler.threads = setting
        return {"sampling_threads": setting, "sampling_threads_from": "scaling.sampling_threads"}
    if trainer.device.type != "cpu" or threads == 1:
        why = "not CPU" if trainer.device.type != "cpu" else "one torch thread"
        return {"sampling_threads": threads, "sampling_threads_from": f"torch_threads ({why})"}
    if setting == "auto":
        if not prompt:
            raise ValueError("scaling.sampling_threads=auto times a decode of a prompt, and there is none")
        chosen = trainer.sampler.time_threads(prompt, thread_candidates(threads))
        return {**chosen.record(), "sampling_threads_from": "timed at start (auto)"}
    if setting is not None:
        raise ValueError(f"sampling_threads must be a count, 'auto' or None, got {setting!r}")
    flop = decode_step_flop(trainer)
    passive = os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE"
    if passive and flop < SMALL_DECODE_FLOP:
        trainer.sampler.threads = 1
        why = f"rule: decode step {flop / 1e6:.0f} MFLOP < {SMALL_DECODE_FLOP / 1e6:.0f}, passive wait"
        return {"sampling_threads": 1, "sampling_threads_from": why}
    why = f"rule: decode step {flop / 1e6:.0f} MFLOP" if passive else "rule: OpenMP threads not passive"
    return {"sampling_threads": threads, "sampling_threads_from": f"torch_threads ({why})"}
