"""Timing decoding's torch thread counts on the policy itself (`scaling.sampling_threads: auto`).

A decode step is a few dozen small kernels (one new token per row), and every parallel region
among them wakes the other OpenMP threads. Under the passive wait policy that the service ships
(idle threads sleep, so a reward worker can have the core) each wake-up costs tens of
microseconds, which can be more than a second thread saves: on a 2-core machine the `tiny` GPT
can decode faster on one thread than on two, while a wide model gains from every core. With
`auto` the worker times a short greedy decode of its own policy with each candidate count,
alternating them, and samples with fewer threads only where that is clearly faster (MARGIN).
Greedy decoding draws no random numbers, so the timing leaves the run's sampling unchanged; the
choice itself can differ between runs, which is why the default is a fixed rule instead
(`actors.run.threads.choose_sampling_threads`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from trainer.config import SamplingConfig
from trainer.policy.base import Policy
from trainer.sampling.sampler import generate
from trainer.threads import torch_threads

TIMED_TOKENS = 8  # new tokens per timed decode: enough steps to time, little start-up cost
ROUNDS = 3  # timed rounds per candidate, candidates alternating
BUDGET_S = 5.0  # no further timed round once the timed ones have taken this long (a large model on CPU)
SLOW = 2.0  # a count this much slower than the best in its untimed call is not timed, nor fewer threads
MARGIN = 1.2  # fewer threads than the most are kept only when this much faster: no flip on noise


@dataclass(frozen=True)
class DecodeThreads:
    threads: int  # the fastest candidate
    ms_per_token: dict[int, float]  # median milliseconds per decode step, by thread count

    def record(self) -> dict[str, object]:
        """What runtime.json keeps: the choice and what it was timed at."""
        return {
            "sampling_threads": self.threads,
            "sampling_threads_ms_per_token": {str(k): round(v, 3) for k, v in self.ms_per_token.items()},
        }


def time_decode_threads(
    policy: Policy, prompt: Sequence[int], cfg: SamplingConfig, candidates: Sequence[int]
) -> DecodeThreads:
    """Time greedy decoding of one micro-batch (`cfg.prompts_per_microbatch` copies of `prompt`,
    `cfg.group_size` rows each) under each thread count in `candidates`. The most threads are kept
    unless a smaller count decodes at least MARGIN times faster; then the fastest count wins.

    After one decode that only warms up, each count decodes once untimed (a count's first call
    pays one-off costs, such as starting threads), from the most threads down; where a count is
    SLOW times slower than the best so far, it and the counts below it are left out, so a large
    model does not decode at length on one thread just to be timed."""
    counts = sorted(set(candidates), reverse=True)
    if not counts or counts[-1] < 1:
        raise ValueError(f"thread candidates must be >= 1, got {list(candidates)}")
    if not prompt:
        raise ValueError("time_decode_threads needs a non-empty prompt")
    tokens = min(TIMED_TOKENS, cfg.max_new_tokens)
    timed_cfg = cfg.model_copy(update={"max_new_tokens": tokens})
    prompts = [list(prompt)] * cfg.prompts_per_microbatch

    def ms_per_token(threads: int) -> float:
        with torch_threads(threads):
            began = time.perf_counter()
            generate(policy, prompts, timed_cfg, greedy=True, stop_at_eos=False)
            return (time.perf_counter() - began) * 1e3 / tokens

    ms_per_token(counts[0])  # the very first decode pays for allocations at any count
    first: dict[int, float] = {}
    for n in counts:
        first[n] = ms_per_token(n)
        if first[n] > SLOW * min(first.values()):
            break
    live = [n for n in first if first[n] <= SLOW * min(first.values())]
    times: dict[int, list[float]] = {n: [] for n in live}
    began = time.perf_counter()
    for _ in range(ROUNDS):
        for n in live:
            times[n].append(ms_per_token(n))
        if time.perf_counter() - began > BUDGET_S:
            break
    per_token = {n: statistics.median(t) for n, t in times.items()}
    return DecodeThreads(pick_threads(per_token), per_token)


def pick_threads(ms_per_token: dict[int, float]) -> int:
    """The most threads, unless a smaller count is at least MARGIN times faster: then the fastest."""
    most = max(ms_per_token)
    fastest = min(ms_per_token, key=lambda n: (ms_per_token[n], n))
    return fastest if ms_per_token[most] >= MARGIN * ms_per_token[fastest] else most
