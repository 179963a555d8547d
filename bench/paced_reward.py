"""A reward whose cost the benchmark sets while the run goes on (`--sections autoscale`).

`paced` is 1.0 for an exact answer, after sleeping the seconds written in the file named by
`GRPO_BENCH_COST_FILE` (re-read at most every 20 ms): the benchmark rewrites it as the run's GRPO
steps pass, so every variant meets the same cost at the same step, as a reward whose cost follows
the policy (longer programs to test, longer games to search) would. A sleep stands for the cost: it
waits as a verifier calling a service does, so the pool's gain shows even on 2 cores.
"""

from __future__ import annotations

import os
import time

_REFRESH_S = 0.02
_cost = {"seconds": 0.0, "read_at": float("-inf")}


def _cost_s() -> float:
    now = time.monotonic()
    if now - _cost["read_at"] >= _REFRESH_S:
        _cost["read_at"] = now
        path = os.environ.get("GRPO_BENCH_COST_FILE")
        try:
            _cost["seconds"] = float(open(path).read()) if path else 0.0
        except (OSError, ValueError):  # being rewritten: keep the last value
            pass
    return _cost["seconds"]


def paced(completion: str, target: str) -> float:
    time.sleep(_cost_s())
    return 1.0 if completion == target else 0.0
