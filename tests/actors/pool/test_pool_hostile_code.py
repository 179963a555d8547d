"""The hostile corpus as completions of the `code` task, scored by a real reward pool: every item
gets a score and its sandbox status, no worker dies or restarts, nothing is left behind, and the
same workers score ordinary programs right afterwards."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest

from actors.pool.config import PoolConfig
from actors.pool.reward_pool import RewardPool
from rewards.code import CodeScorer
from rewards.sandbox import SandboxLimits, sandbox_unavailable_reason
from tests.rewards.sandbox.hostile_programs import CORPUS, MARKER, SECRET, filled

pytestmark = [
    pytest.mark.usefixtures("ray_cluster"),
    pytest.mark.skipif(sandbox_unavailable_reason() is not None, reason="no sandbox here"),
]
LIMITS = SandboxLimits(wall_s=2.0, cpu_s=2.0)
SANDBOX_STATUSES = {"ok", "failed", "timeout", "memory", "output_limit", "killed"}


def _completion(source: str) -> str:
    return f"Here it is:\n```python\n{filled(source)}\n```\n"


def _statuses(results) -> list[str]:
    found = []
    for result in results:
        marked = [
            k[len("sandbox_") :] for k, v in result.components.items() if k.startswith("sandbox_") and v
        ]
        assert len(marked) == 1, result
        found.append(marked[0])
    return found


@pytest.mark.slow
def test_the_hostile_corpus_through_the_pool_is_scored_and_leaves_the_workers_alive():
    completions = [_completion(source) for _, source, *_ in CORPUS]
    fields = [{"test_list": ["assert True"]}] * len(completions)
    targets = [None] * len(completions)
    scorer = CodeScorer(limits=LIMITS)
    cfg = PoolConfig(name_prefix=f"hostile-{uuid.uuid4().hex[:6]}", num_workers=2, chunk_size=4,
                     min_chunk_size=2, chunk_timeout_s=120)  # fmt: skip
    with RewardPool.create(scorer, cfg, run_id="hostile-code") as pool:
        pids = pool.worker_pids()
        results = pool.collect_results([pool.submit(completions, targets, fields=fields)])
        statuses = _statuses(results)
        counts = Counter(statuses)
        assert set(counts) <= SANDBOX_STATUSES and sum(counts.values()) == len(CORPUS), counts
        assert all(r.status in ("ok", "invalid") for r in results), [r for r in results if r.usable is False]
        for (name, *_), result, status in zip(CORPUS, results, statuses, strict=True):
            assert 0.0 <= result.total <= 1.0, (name, result)
            if status != "ok":
                assert result.total == 0.0, (name, result)  # a program cut by a limit passes nothing
        for name in ("infinite_loop", "sleep_forever", "memory_bomb", "megabytes_stdout"):
            assert statuses[[c[0] for c in CORPUS].index(name)] != "ok", name
        assert pool.worker_pids() == pids and pool.stats()["worker_restarts"] == 0
        print("statuses of the corpus through the pool:", dict(sorted(counts.items())))
        ordinary = pool.score([_completion("x = 1")] * 4, [None] * 4, [{"test_list": ["assert x == 1"]}] * 4)
        assert [r.total for r in ordinary] == [1.0] * 4
    assert SECRET not in repr(results)
    assert not [p for p in (Path("/tmp"), Path.home(), Path("/dev/shm")) for _ in p.glob(f"*{MARKER}*")]
