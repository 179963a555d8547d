"""An autoscaled pool on a multi-node cluster: a growth the cluster has no room for waits for a
node, and a node added mid-run receives the new worker; every reward stays what it would be.

The cluster: a head without CPUs, a trainer node, and one reward node with room for one reward
worker (`reward_node: 1`). The reward sleeps 40 ms an item, so a pool of one worker makes the
trainer wait most of each step and the pool decides to grow to 2; the worker it starts stays
pending until the test adds a second reward node.
"""

from __future__ import annotations

import sys
import time

import pytest
from fault_runs import driver_run, read_rows, summary
from ray_nodes import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

RUN_TIMEOUT_S = 600.0  # a loaded 2-core machine runs these steps 10-50x slower than an idle one
REWARD_NODE = {"num_cpus": 1, "resources": {"reward_node": 1}, "labels": {"role": "reward"}}
SETS = (
    "pool.placement=pool",
    "pool.num_workers=1",
    "pool.cpus_per_worker=0.5",
    "pool.resources.reward_node=1",
    "pool.label_selector.role=reward",
    "scaling.resources_per_worker.trainer_node=1",
    "pool.autoscale={min_workers: 1, max_workers: 2, target_wait_share: 0.2, cooldown_steps: 2}",
    "pool.start_timeout_s=600",  # a new worker waits this long for room on the cluster
    "reward.user=[{fn: 'examples.rewards.misbehaving:slow'}]",
    "grpo.steps=40",
    "grpo.eval_every=100",
)


def _wait_for_line(run, prefix: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [line for line in list(run.lines) if line.startswith(prefix)]
        if found:
            return found[0]
        assert run.proc.poll() is None, f"the run ended before {prefix!r}:\n{run.tail()}"
        time.sleep(0.1)
    raise AssertionError(f"no {prefix!r} within {timeout_s:g}s:\n{run.tail()}")


def test_a_growth_without_room_waits_for_a_node_added_mid_run_which_receives_the_worker(
    tmp_path, monkeypatch
):
    from ray.util.state import list_actors

    monkeypatch.setenv("GRPO_EXAMPLE_SLOW_S", "0.04")  # the nodes' workers inherit it
    (tmp_path / "logs").mkdir()
    cluster = LocalCluster(tmp_path / "logs")
    try:
        cluster.start_head()
        cluster.add_node("trainer", num_cpus=1, resources={"trainer_node": 1})
        cluster.add_node("reward-a", **REWARD_NODE)
        run_dir = tmp_path / "run"
        argv = [sys.executable, "-m", "service.train", "--preset", "smoke", "--run-dir", str(run_dir)]
        argv += [word for value in SETS for word in ("--set", value)]
        with driver_run(argv, tmp_path / "run.log", cluster.env()) as run:
            decided = _wait_for_line(run, "[pool] after step ", RUN_TIMEOUT_S)
            assert "1 -> 2 reward workers" in decided, decided
            time.sleep(2.0)  # the new worker has no room: the ranks go on with one
            before_node = run.last_step()
            cluster.add_node("reward-b", **REWARD_NODE)
            assert run.wait(RUN_TIMEOUT_S) == 0, run.tail()
            workers = list_actors(
                address=cluster.dashboard_url,
                filters=[("class_name", "=", "RewardWorker")],
                limit=100,
                detail=True,
            )
        assert summary(run_dir)["status"] == "succeeded"
        rows = [r for r in read_rows(run_dir / "metrics.jsonl") if r["phase"] == "grpo"]
        assert all(r["pool_workers"] == 1.0 for r in rows if r["step"] <= before_node), rows
        grown = [r for r in rows if r["pool_workers"] == 2.0]
        assert grown and grown[0]["pool_resized_to"] == 2.0 and grown[-1]["step"] == rows[-1]["step"]
        assert all(r["pool_workers_alive"] == r["pool_workers"] for r in rows)
        placed = {w.name: cluster.node_named(w.node_id) for w in workers}
        assert placed == {"reward-worker-0": "reward-a", "reward-worker-1": "reward-b"}, placed
    finally:
        cluster.shutdown()
