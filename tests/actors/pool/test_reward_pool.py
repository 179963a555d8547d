"""RewardPool on a real local Ray cluster: results, order, names, inputs, metrics, shutdown."""

from __future__ import annotations

import time
import urllib.request
import uuid

import pytest
import ray
from user_rewards import scoring_clock

from actors.pool.config import PoolConfig
from actors.pool.errors import RewardCollectTimeout, RewardPoolUnavailable
from actors.pool.reward_pool import RewardPool
from actors.pool.scoring import ChunkScorer
from actors.pool.submission import chunk_payload
from bench.pool_workload import measure_pool, realistic_batch
from rewards import (
    BAD_INPUT,
    STATUSES,
    TOO_LONG,
    USABLE_STATUSES,
    FenScorer,
    RewardConfig,
    RewardSpecError,
    UserRewardScorer,
    register_reward,
    unregister_reward,
)
from rewards.config import UserRewardSpec
from trainer.grpo.reward_source import Rewards, RewardSource

pytestmark = pytest.mark.usefixtures("ray_cluster")

FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
USER = RewardConfig(user=[UserRewardSpec(fn="user_rewards:length_bonus", weight=0.5)])


def _prefix() -> str:
    return f"test-{uuid.uuid4().hex[:6]}"


def _pool(reward: RewardConfig = USER, worker_clock=time.perf_counter, **cfg) -> RewardPool:
    cfg = PoolConfig(**{"name_prefix": _prefix(), **cfg})
    return RewardPool.create(reward, cfg, run_id="test", worker_clock=worker_clock)


def _wait_gone(name: str, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get_actor(name)
        except ValueError:
            return True
        time.sleep(0.1)
    return False


def test_pool_results_equal_in_process_in_submission_order_and_shutdown_kills_actors():
    pool = _pool(chunk_size=128, min_chunk_size=16)
    source: RewardSource = pool  # the trainer's protocol
    names = pool.worker_names()
    assert names == [f"{pool.cfg.name_prefix}-0", f"{pool.cfg.name_prefix}-1"]
    assert ray.get(ray.get_actor(names[0]).ping.remote(), timeout=30) == pool.worker_pids()[names[0]]
    batches = [realistic_batch(n, seed=n) for n in (1000, 7, 300, 0, 129)]
    tickets = [pool.submit(c, t, group_ids=[i // 8 for i in range(len(c))]) for c, t in batches]
    results = pool.collect_results(tickets)
    expected = [r for c, t in batches for r in FenScorer(USER).score_batch(c, t)]
    assert results == expected  # same totals, components, statuses and reasons, in order
    rewards = source.collect(tickets)
    assert rewards.values == [r.total for r in expected]
    assert rewards.statuses == [r.status for r in expected]
    assert rewards.usable == [r.status in USABLE_STATUSES for r in expected]
    assert rewards.stats["reward_items"] == 1436 and rewards.stats["reward_errors"] == 0
    assert tickets[0].group_ids[:9] == (0, 0, 0, 0, 0, 0, 0, 0, 1)
    pool.shutdown()
    assert all(_wait_gone(n) for n in names)
    with pytest.raises(RewardPoolUnavailable, match="shut down"):
        pool.submit(["x"], [FEN])


def test_scoring_progresses_while_the_caller_does_not_call_the_pool():
    completions, targets = realistic_batch(4000, seed=11, distinct_targets=50)
    # 40 chunks but only 2 workers x 2 calls in flight: the rest must be dispatched by the pool itself.
    with _pool(chunk_size=100, min_chunk_size=100, max_in_flight_per_worker=2) as pool:
        ticket = pool.submit(completions, targets)
        assert pool.stats()["in_flight_items"] <= 400
        deadline = time.monotonic() + 60  # only a guard against a hang: this takes about a second
        while not ticket.done and time.monotonic() < deadline:
            time.sleep(0.05)  # the caller is busy elsewhere (sampling the next micro-batch)
        assert ticket.done and pool.stats()["items_scored"] == 4000  # before any collect
        rewards = pool.collect([ticket])
        assert rewards.statuses == [r.status for r in FenScorer(USER).score_batch(completions, targets)]


def _known_cost(fn: str) -> RewardConfig:
    """A reward that takes a known time an item on `user_rewards.scoring_clock`, the clock its
    workers are given: the cost they measure is the same on any machine, idle or loaded."""
    return RewardConfig(user=[UserRewardSpec(fn=f"user_rewards:{fn}")])


def test_a_cheap_reward_stops_being_spread_once_the_workers_have_measured_it():
    completions, targets = [FEN] * 64, [FEN] * 64  # every item reaches the reward
    with _pool(_known_cost("costs_a_microsecond"), scoring_clock, min_chunk_size=32) as pool:  # two workers
        first = pool.submit(completions, targets)  # nothing measured yet: two calls of 32
        pool.collect([first])
        assert pool.stats()["seconds_per_item"] == pytest.approx(1e-6)
        assert pool.cfg.spread_min_s / 1e-6 > 64  # a piece worth a call holds more than the submission
        second = pool.submit(completions, targets)
        assert pool.collect([second]).values == pool.collect([first]).values
        assert [len(b) for b in first.blocks()] == [32, 32] and [len(b) for b in second.blocks()] == [64]
        # one call a submission, the workers taking turns: each stays in use (a dead one is met)
        handles = pool.worker_handles()
        before = [ray.get(h.items_done.remote(), timeout=30) for h in handles]
        for _ in range(4):
            pool.collect([pool.submit(completions, targets)])
        after = [ray.get(h.items_done.remote(), timeout=30) for h in handles]
        assert [a - b for a, b in zip(after, before, strict=True)] == [128, 128]
    with _pool(min_chunk_size=32, spread_min_s=0.0) as pool:  # the rule off: min_chunk_size alone
        pool.collect([pool.submit(completions, targets)])
        again = pool.submit(completions, targets)
        pool.collect([again])
        assert [len(b) for b in again.blocks()] == [32, 32]


def test_a_costly_reward_stays_spread_once_the_workers_have_measured_it():
    completions, targets = [FEN] * 64, [FEN] * 64
    with _pool(_known_cost("costs_a_millisecond"), scoring_clock, min_chunk_size=32) as pool:
        pool.collect([pool.submit(completions, targets)])
        assert pool.stats()["seconds_per_item"] == pytest.approx(1e-3)
        assert pool.cfg.spread_min_s / 1e-3 <= 32  # a piece of min_chunk_size is already worth a call
        again = pool.submit(completions, targets)
        pool.collect([again])
        assert [len(b) for b in again.blocks()] == [32, 32]


def test_items_with_fields_score_through_the_pool_inline_and_through_the_store():
    scorer = UserRewardScorer(RewardConfig(user=[UserRewardSpec(fn="user_rewards:sum_of_fields")]))
    pool = _pool(scorer, chunk_size=4096)
    try:
        for n, pad in ((64, 0), (512, 400)):  # 512 rows with 400-char fields: past the inline limit
            rows = [{"a": i, "b": 2, "note": "x" * pad} for i in range(n)]
            completions = [str(i + 2) if i % 3 else "?" for i in range(n)]
            targets = [None] * n
            in_store = isinstance(chunk_payload((completions, targets, rows), 0), ray.ObjectRef)
            assert in_store == (pad > 0)
            results = pool.score(completions, targets, rows)
            assert results == scorer.score_batch(completions, targets, rows)
            assert sum(r.total for r in results) == n - len(range(0, n, 3))
        with pytest.raises(ValueError, match="2 field rows for 3 completions"):
            pool.submit(["1", "2", "3"], [None] * 3, fields=[{}, {}])
    finally:
        pool.shutdown()


def test_second_pool_with_the_same_names_fails_clearly_and_another_prefix_works():
    with _pool(num_workers=1) as first:
        with pytest.raises(RewardPoolUnavailable, match="name_prefix"):
            RewardPool.create(USER, first.cfg)
        with _pool(num_workers=1) as second:
            assert second.score([FEN], [FEN])[0].status == "ok"
        assert first.score([FEN], [FEN])[0].status == "ok"


def test_bad_submissions_are_refused_with_a_clear_error():
    with _pool(num_workers=1) as pool, _pool(num_workers=1) as other:
        with pytest.raises(ValueError, match="2 completions and 1 targets"):
            pool.submit(["a", "b"], [FEN])
        with pytest.raises(TypeError, match="completions must be a list or tuple"):
            pool.submit("abc", [FEN] * 3)
        with pytest.raises(ValueError, match="group_ids"):
            pool.submit(["a"], [FEN], group_ids=[1, 2])
        with pytest.raises(ValueError, match=r"one entry per item each, got lengths \[1, 2\]"):
            pool.workers.call(ChunkScorer.score, (["a", "b"], [FEN]))
        with pytest.raises(ValueError, match="not a ticket of this pool"):
            pool.collect([other.submit(["a"], [FEN])])
        empty = pool.collect([pool.submit([], [])])
        assert empty == Rewards([], [], [], empty.stats) and empty.stats["reward_items"] == 0


def test_a_user_reward_that_cannot_be_resolved_fails_at_create():
    bad = RewardConfig(user=[UserRewardSpec(fn="user_rewards:no_such_reward")])
    with pytest.raises(RewardSpecError, match="no attribute 'no_such_reward'"):
        RewardPool.create(bad, PoolConfig(name_prefix=_prefix()))


def test_a_reward_registered_in_this_process_travels_to_the_workers_with_the_scorer():
    register_reward("e4_bonus", lambda completion, target: 1.0 if "4P3" in completion else 0.0)
    try:
        reward = RewardConfig(user=[UserRewardSpec(fn="e4_bonus", weight=2.0)])
        with _pool(reward, num_workers=1) as pool:
            (result,) = pool.score([FEN], [FEN])
        assert result.components["e4_bonus"] == 1.0 and result.total == 3.0
    finally:
        unregister_reward("e4_bonus")


def test_workers_that_cannot_be_placed_fail_at_create_naming_the_cpus():
    cfg = PoolConfig(name_prefix=_prefix(), num_workers=1, cpus_per_worker=64, start_timeout_s=2)
    with pytest.raises(RewardPoolUnavailable, match=r"could not start.*1 x 64.0 CPUs of the cluster's 4.0"):
        RewardPool.create(None, cfg)


def test_ten_thousand_adversarial_completions_get_explicit_statuses():
    odd = ["", " ", "\x00", "\x00" * 100, "é♞\ud800中😀", "\n\t", FEN + "\x00", "x" * 1_000_000, None, 7, 1.5,
           b"bytes", ["list"], {"d": 1}, FEN]  # fmt: skip
    completions = [odd[i % len(odd)] for i in range(10_000)]
    targets = [FEN if i % 97 else None for i in range(10_000)]
    with _pool(chunk_size=512, min_chunk_size=64) as pool:
        results = pool.score(completions, targets)
        assert results == FenScorer(USER).score_batch(completions, targets)
        assert {r.status for r in results} <= set(STATUSES)
        assert all(
            r.status == BAD_INPUT for c, r in zip(completions, results, strict=True) if not isinstance(c, str)
        )
        assert results[7].status == TOO_LONG
        assert pool.score([FEN], [FEN])[0].status == "ok"  # still serving


def test_an_attached_client_scores_on_the_same_workers_and_leaves_them_running():
    with _pool(num_workers=2) as owner:
        client = RewardPool.attach(owner.cfg, run_id="client")
        assert client.worker_pids() == owner.worker_pids()
        assert client.score([FEN, "junk"], [FEN, FEN]) == owner.score([FEN, "junk"], [FEN, FEN])
        client.shutdown()
        assert owner.score([FEN], [FEN])[0].status == "ok"
    with pytest.raises(RewardPoolUnavailable, match="no reward worker named"):
        RewardPool.attach(owner.cfg)


def test_a_client_attaching_while_a_worker_restarts_waits_for_it():
    with _pool(num_workers=2) as owner:
        before = owner.worker_pids()
        ray.kill(ray.get_actor(owner.worker_names()[0]), no_restart=False)  # Ray brings it back
        client = RewardPool.attach(owner.cfg, run_id="client")  # its first ping meets "restarting"
        assert client.score([FEN], [FEN])[0].status == "ok"
        second = owner.worker_names()[1]
        assert client.worker_pids()[second] == before[second]
        client.shutdown()


def test_a_worker_added_takes_calls_and_one_removed_finishes_its_calls_then_leaves():
    completions, targets = realistic_batch(2000, seed=5)
    expected = FenScorer(USER).score_batch(completions, targets)
    with _pool(num_workers=1, chunk_size=250, min_chunk_size=250, spread_min_s=0.0) as pool:
        first = pool.worker_names()[0]
        added = pool.workers.add_worker()
        assert added == f"{pool.cfg.name_prefix}-1" and pool.worker_names() == [first, added]
        assert pool.score(completions, targets) == expected
        done = [ray.get(h.items_done.remote(), timeout=30) for h in pool.worker_handles()]
        assert all(n > 0 for n in done) and sum(done) == 2000  # the new worker took its share
        busy = pool.submit(completions, targets)  # eight calls, some queued on the first worker
        assert pool.workers.remove_worker(first) == first
        assert pool.collect_results([busy]) == expected  # nothing lost: its calls ran, or ran elsewhere
        assert _wait_gone(first) and pool.worker_names() == [added]
        assert pool.score(completions, targets) == expected
        with pytest.raises(ValueError, match="last worker"):
            pool.workers.remove_worker()
    assert _wait_gone(added)


def test_collect_gives_up_at_its_timeout_with_a_clear_error():
    spin = RewardConfig(user=[UserRewardSpec(fn="user_rewards:spins_on_marker")])
    with _pool(spin, num_workers=1, chunk_timeout_s=60) as pool:
        ticket = pool.submit(["HANG"], [FEN])
        began = time.monotonic()
        with pytest.raises(RewardCollectTimeout, match="1 of 1 reward tickets not done after 0.5s"):
            pool.collect([ticket], timeout_s=0.5)
        assert time.monotonic() - began < 10 * 0.5  # only a guard against a collect that never returns


def _series(text: str, name: str, run_id: str) -> list[str]:
    return [
        line for line in text.splitlines() if line.startswith(name + "{") and f'run_id="{run_id}"' in line
    ]


def test_metrics_reach_the_node_prometheus_endpoint_with_run_and_worker_tags():
    run_id = f"metrics-{uuid.uuid4().hex[:6]}"
    with RewardPool.create(None, PoolConfig(name_prefix=_prefix(), num_workers=1), run_id=run_id) as pool:
        pool.collect([pool.submit([FEN] * 10, [FEN] * 10)])
        worker = pool.worker_names()[0]
        port = ray.nodes()[0]["MetricsExportPort"]
        deadline, text = time.monotonic() + 30, ""
        while time.monotonic() < deadline:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            if _series(text, "ray_reward_pool_items_total", run_id) and _series(
                text, "ray_reward_pool_wait_s_count", run_id
            ):
                break
            time.sleep(0.5)
    items = _series(text, "ray_reward_pool_items_total", run_id)
    assert items and f'worker="{worker}"' in items[0] and items[0].endswith(" 10.0")
    assert _series(text, "ray_reward_pool_wait_s_count", run_id)[0].endswith(" 1.0")


def test_measure_pool_reports_rates_and_where_the_time_went():
    out = measure_pool(items=(512,), chunk_sizes=(128,), worker_counts=(1,), repeats=1, dispatch_calls=5)
    (row,) = out["rows"]
    assert (row["items"], row["workers"], row["chunk_size"], row["chunks"]) == (512, 1, 128, 4)
    assert row["pool_items_per_s"] > 0 and row["inprocess_items_per_s"] > 0 and row["speedup"] > 0
    assert 0 < row["busiest_worker_s"] <= row["pool_wall_s"] and 0 < row["worker_cpu_share"] <= 1.5
    assert out["dispatch"]["pool_1_item_ms"] > 0 and out["cpus"] == 4.0
