"""A reward whose cost changes over a run by a schedule the benchmark sets (`--sections autoscale`).

`paced` is 1.0 for an exact answer, after sleeping the cost the schedule gives for the item it is:
the file named by `GRPO_BENCH_COST_FILE` holds `{"items_per_step": n, "costs": [[until_step,
seconds], ...]}`, and every call, in any worker process on the machine, counts itself in the file
beside it (`<file>.count`, under a lock). Item k is priced as GRPO step k // n + 1: the items every
run scores before its first GRPO step (the checks, the first evaluation) shift all variants alike,
so every variant meets the same cost at the same step whatever its speed. A sleep stands for the
cost: it waits as a verifier calling a service does, so the pool's gain shows even on 2 cores.
"""

from __future__ import annotations

import fcntl
import json
import os
import time

_schedule: dict = {}


def _next_item(counter: str) -> int:
    fd = os.open(counter, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.read(fd, 32)
        count = int(raw) if raw.strip() else 0
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, str(count + 1).encode())
        return count
    finally:
        os.close(fd)


def cost_s(schedule: dict, item: int) -> float:
    """Seconds the schedule gives item `item` (0-based)."""
    step = item // schedule["items_per_step"] + 1
    for until, seconds in schedule["costs"]:
        if step <= until:
            return seconds
    return schedule["costs"][-1][1]


def paced(completion: str, target: str) -> float:
    path = os.environ.get("GRPO_BENCH_COST_FILE")
    if path:
        if not _schedule:
            with open(path) as f:
                _schedule.update(json.load(f))
        time.sleep(cost_s(_schedule, _next_item(path + ".count")))
    return 1.0 if completion == target else 0.0
