"""Several gloo ranks in spawned processes, for tests that compare them with one process.

`spawn_ranks(body, args)` runs body(rank, world, *args) in each rank, inside a gloo group that is
destroyed only after body has returned. A DDP model freed after its group was destroyed frees the
group from its reducer's destructor, which joins gloo's threads while holding the GIL that one of
them waits for: the rank deadlocks at exit. Bounded besides: a collective times out
(COLLECTIVE_TIMEOUT_S), and past `timeout_s` every rank is killed and the test fails, since a stuck
non-daemon child would otherwise keep the whole pytest process alive after the test.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

COLLECTIVE_TIMEOUT_S = 240


def _rank_entry(rank: int, world: int, rendezvous: str, body: Callable, args: tuple) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{rendezvous}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    try:
        body(rank, world, *args)
    finally:
        gc.collect()  # body's DDP reducers go while the group is alive
        dist.destroy_process_group()


def spawn_ranks(
    body: Callable, rendezvous: str, args: tuple, world: int = 2, timeout_s: float = 420.0
) -> None:
    """Run body(rank, world, *args) in `world` spawned gloo ranks; fail (never hang) past timeout_s."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.start_processes(
        _rank_entry, args=(world, rendezvous, body, args), nprocs=world, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                pytest.fail(f"{world} ranks did not finish within {timeout_s:g}s; killed them")
    finally:
        for proc in ctx.processes:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
