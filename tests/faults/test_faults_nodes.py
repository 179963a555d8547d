"""Faults at cluster scale: runs on a real multi-node Ray cluster on this machine, nodes killed whole.

The cluster: a head with no CPUs (GCS, dashboard, the drivers), a `trainer` node offering the
custom resource `trainer_node`, and two reward nodes offering `reward_node` and the label
`role=reward`. Runs ask for those (`scaling.resources_per_worker`, `pool.resources`,
`pool.label_selector`), and where their actors run is read from Ray's state API. A node is
killed with all its processes at once (its raylet's session), as a machine that loses power.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from fault_runs import (
    FAULT_SETS,
    FinishedRun,
    assert_same_weights,
    checkpoint_steps,
    driver_run,
    final_weights,
    first_difference,
    read_rows,
    stable_rows,
    summary,
    train_argv,
)
from ray_nodes import LocalCluster

from actors.run.control import TRAIN_POLL_DEFAULT_S, TRAIN_POLL_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

RUN_TIMEOUT_S = 600.0  # a loaded 2-core machine runs these steps 10-50x slower than an idle one
RESTART_TIMEOUT_S = 8.0  # pool.restart_timeout_s of these runs: the bounded wait for a lost worker
TOTAL_STEPS = 4 + 20
# FAULT_SETS with 20 GRPO steps, 3 reward workers and the placement of a cluster deployment.
NODE_SETS: tuple[str, ...] = (
    *FAULT_SETS,
    "grpo.steps=20",
    "pool.num_workers=3",
    "pool.resources.reward_node=1",
    "pool.label_selector.role=reward",
    "scaling.resources_per_worker.trainer_node=1",
    f"pool.restart_timeout_s={RESTART_TIMEOUT_S:g}",
)
REWARD_NODE = {"num_cpus": 1, "resources": {"reward_node": 2}, "labels": {"role": "reward"}}
TRAINER_NODE = {"num_cpus": 1, "resources": {"trainer_node": 1}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """Head (no CPUs), one trainer node, two reward nodes of 2 reward slots each."""
    c = LocalCluster(tmp_path_factory.mktemp("cluster-logs"))
    try:
        c.start_head()
        c.add_node("trainer", **TRAINER_NODE)
        c.add_node("reward-a", **REWARD_NODE)
        c.add_node("reward-b", **REWARD_NODE)
        yield c
    finally:
        c.shutdown()


def alive_actors(c: LocalCluster) -> dict[str, list[str]]:
    """Class name -> the names of the nodes its ALIVE actors run on, from Ray's state API."""
    from ray.util.state import list_actors

    found: dict[str, list[str]] = {}
    for actor in list_actors(address=c.dashboard_url, filters=[("state", "=", "ALIVE")], limit=1000):
        found.setdefault(actor.class_name, []).append(c.node_named(actor.node_id))
    return found


def reward_actors(c: LocalCluster) -> list:
    """Every RewardWorker actor the cluster has had (alive or dead), from Ray's state API."""
    from ray.util.state import list_actors

    filters = [("class_name", "=", "RewardWorker")]
    return list_actors(address=c.dashboard_url, filters=filters, limit=1000, detail=True)


def reward_nodes_alive(c: LocalCluster, want: int = 2) -> list[str]:
    """Names of the live reward nodes, adding fresh ones until there are `want`."""
    alive = [name for name, node in c.nodes.items() if name.startswith("reward") and node.proc.poll() is None]
    while len(alive) < want:
        name = f"reward-{len(c.nodes)}"
        c.add_node(name, **REWARD_NODE)
        alive.append(name)
    return alive


@pytest.fixture(scope="module")
def cluster_reference(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory):
    """A fault-free run on the cluster, and where its actors ran (sampled during GRPO)."""
    root = tmp_path_factory.mktemp("node-runs")
    run_dir = root / "reference"
    with driver_run(train_argv(run_dir, NODE_SETS), root / "reference.log", cluster.env()) as run:
        run.wait_for_step(6, RUN_TIMEOUT_S)
        placement = alive_actors(cluster)
        rc = run.wait(RUN_TIMEOUT_S)
        output = run.output
    return FinishedRun(run_dir, rc, output), placement


def test_trainers_run_on_the_trainer_node_and_every_reward_worker_on_reward_nodes(cluster_reference):
    reference, placement = cluster_reference
    s = summary(reference.run_dir)
    assert reference.returncode == 0 and s["status"] == "succeeded", s.get("error")
    assert placement.get("RayTrainWorker") == ["trainer"], placement
    rewards = placement.get("RewardWorker", [])
    assert len(rewards) == 3 and set(rewards) <= {"reward-a", "reward-b"}, placement
    # The head runs no work (it has no CPUs); the run's control actor is pinned beside the driver.
    assert placement.get("RunControl") == ["head"], placement
    # The driver's poll interval reached Ray Train's workers on the trainer node (checkpoints
    # every 2 steps would otherwise wait for Ray Train's 2 s poll each time).
    runtime = json.loads((reference.run_dir / "runtime.json").read_text())
    assert runtime[TRAIN_POLL_ENV] == TRAIN_POLL_DEFAULT_S, runtime


def test_a_reward_node_killed_mid_run_changes_no_reward(cluster, cluster_reference, tmp_path):
    reference, _ = cluster_reference
    reward_nodes_alive(cluster)
    run_dir = tmp_path / "reward-node-killed"
    with driver_run(train_argv(run_dir, NODE_SETS), tmp_path / "run.log", cluster.env()) as run:
        run.wait_for_step(5, RUN_TIMEOUT_S)
        # Two reward slots per node for three workers: one node holds two. Kill that one; the
        # survivor has room to restart one of them, so the run goes on with 2 of 3.
        hosts = Counter(alive_actors(cluster)["RewardWorker"])
        victim, held = hosts.most_common(1)[0]
        assert held == 2, hosts
        killed_at = run.last_step()
        cluster.kill(victim)
        rc = run.wait(RUN_TIMEOUT_S)
        output = run.output
    s = summary(run_dir)
    assert rc == 0 and s["status"] == "succeeded", s.get("error")
    assert killed_at < TOTAL_STEPS - 2, "the kill came too late to test anything"
    rows = read_rows(run_dir / "metrics.jsonl")
    rewards = [(r["step"], r.get("reward_mean")) for r in rows]
    expected = [(r["step"], r.get("reward_mean")) for r in read_rows(reference.run_dir / "metrics.jsonl")]
    assert rewards == expected, first_difference(expected, rewards)
    # Ray restarted one of the two on the survivor (the one without a call in flight may come back
    # before the pool ever saw it gone), as its state API shows.
    survivor = next(name for name in hosts if name != victim)
    restarted = [cluster.node_named(a.node_id) for a in reward_actors(cluster) if a.num_restarts >= 1]
    assert survivor in restarted, (survivor, restarted)
    # Said three ways: the step records (metric), a console line, the client's pool health.
    assert rows[-1]["pool_workers_alive"] == 2 and rows[-1]["pool_workers"] == 3, rows[-1]
    assert "2 of 3 reward workers take work" in output
    progress = [
        json.loads(line.split(" ", 1)[1]) for line in output.splitlines() if "[grpo-progress]" in line
    ]
    pool = [p["pool"] for p in progress if "pool" in p]
    assert pool[-1]["workers_alive"] == 2 and pool[-1]["workers"] == 3, pool[-1]


def test_the_last_reward_nodes_killed_fail_the_run_after_a_bounded_wait(cluster, tmp_path):
    nodes = reward_nodes_alive(cluster)
    run_dir = tmp_path / "reward-nodes-gone"
    with driver_run(train_argv(run_dir, NODE_SETS), tmp_path / "run.log", cluster.env()) as run:
        run.wait_for_step(8, RUN_TIMEOUT_S)
        for name in nodes:
            cluster.kill(name)
        killed = time.monotonic()
        rc = run.wait(RUN_TIMEOUT_S)  # only a guard against a hang
        took = time.monotonic() - killed
        output = run.output
    s = summary(run_dir)
    assert rc == 1 and s["status"] == "failed", output[-3000:]
    assert "reward workers are dead" in s["error"], s["error"]
    assert f"did not answer within pool.restart_timeout_s={RESTART_TIMEOUT_S:g}s" in s["error"], s["error"]
    assert "reward_node" in s["error"], s["error"]  # what a node must offer to take them
    assert checkpoint_steps(run_dir) and s["last_checkpoint"], s
    # What bounds the wait is pool.restart_timeout_s, as the error says (the rule itself, fed a clock:
    # tests/actors/pool/test_worker_health.py); how long it took here is this machine's business.
    print(f"failed {took:.1f}s after the last reward node was killed: {s['error']}")


def trainer_node(c: LocalCluster) -> str:
    """The live trainer node's name."""
    (name,) = [n for n, node in c.nodes.items() if n.startswith("trainer") and node.proc.poll() is None]
    return name


def replace_trainer_node(c: LocalCluster) -> str:
    """Kill the trainer node with all its processes, then start a fresh one (a new machine)."""
    c.kill(trainer_node(c))
    name = f"trainer-{len(c.nodes)}"
    c.add_node(name, **TRAINER_NODE)
    return name


def test_a_killed_trainer_node_is_replaced_and_the_run_ends_with_the_fault_free_weights(
    cluster, cluster_reference, tmp_path
):
    reference, _ = cluster_reference
    reward_nodes_alive(cluster)
    run_dir = tmp_path / "trainer-node-killed"
    argv = train_argv(run_dir, (*NODE_SETS, "run.max_failures=1"))
    with driver_run(argv, tmp_path / "run.log", cluster.env()) as run:
        run.wait_for_step(9, RUN_TIMEOUT_S)  # past the checkpoint of step 8
        killed_at = run.last_step()
        new_node = replace_trainer_node(cluster)
        run.wait_for_step(TOTAL_STEPS - 1, RUN_TIMEOUT_S)
        placement = alive_actors(cluster)
        rc = run.wait(RUN_TIMEOUT_S)
    s = summary(run_dir)
    assert rc == 0 and s["status"] == "succeeded", s.get("error")
    # Restarted from a checkpoint, not from step 0: the latest one Ray Train had registered when the
    # node died (its controller collects a report on its next poll, so the one before may be it).
    assert s["resumed_from"] and killed_at - 4 <= s["resumed_from"] <= killed_at, (killed_at, s)
    assert placement.get("RayTrainWorker") == [new_node], placement
    rows, expected = stable_rows(run_dir), stable_rows(reference.run_dir)
    assert rows == expected, first_difference(expected, rows)
    assert_same_weights(final_weights(run_dir, TOTAL_STEPS), final_weights(reference.run_dir, TOTAL_STEPS))


def test_without_restarts_a_killed_trainer_node_fails_the_run_and_resume_continues_exactly(
    cluster, cluster_reference, tmp_path
):
    reference, _ = cluster_reference
    reward_nodes_alive(cluster)
    run_dir = tmp_path / "trainer-node-killed-no-restart"
    with driver_run(train_argv(run_dir, NODE_SETS), tmp_path / "run.log", cluster.env()) as run:
        run.wait_for_step(9, RUN_TIMEOUT_S)
        replace_trainer_node(cluster)
        rc = run.wait(RUN_TIMEOUT_S)
    s = summary(run_dir)
    assert rc == 1 and s["status"] == "failed" and s["error"], s
    assert checkpoint_steps(run_dir), "the checkpoints written before the kill stay"
    with driver_run(
        train_argv(run_dir, NODE_SETS, resume=True), tmp_path / "resume.log", cluster.env()
    ) as run:
        rc = run.wait(RUN_TIMEOUT_S)
        output = run.output
    s = summary(run_dir)
    assert rc == 0 and s["status"] == "succeeded", s.get("error")
    assert f"resuming from the checkpoint of step {s['resumed_from']} " in output
    rows, expected = stable_rows(run_dir), stable_rows(reference.run_dir)
    assert rows == expected, first_difference(expected, rows)
    assert_same_weights(final_weights(run_dir, TOTAL_STEPS), final_weights(reference.run_dir, TOTAL_STEPS))
