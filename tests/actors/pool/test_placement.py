"""pool.placement: auto measures both sides for the built-in reward and keeps the cheaper, and puts
user rewards on the pool; in process keeps the pool's statuses and guard, and a reward that overruns
the deadline in process hands over to the pool."""

from __future__ import annotations

import uuid

import pytest

from actors.pool.config import PoolConfig
from actors.pool.placement import PlacedRewards
from actors.pool.reward_pool import RewardPool
from bench.pool_workload import realistic_batch
from rewards import TIMEOUT, FenScorer, RewardConfig, UserRewardScorer
from rewards.config import UserRewardSpec
from trainer.grpo.reward_source import component_means

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _cfg(**kw) -> PoolConfig:
    return PoolConfig(**{"name_prefix": f"place-{uuid.uuid4().hex[:6]}", "num_workers": 2, **kw})


def _steps(placed: PlacedRewards, batches, per_step: int = 2):
    """GRPO-like steps: a few submits (micro-batches), then one collect."""
    out = []
    for completions, targets in batches:
        size = len(completions) // per_step
        tickets = [
            placed.submit(completions[i : i + size], targets[i : i + size])
            for i in range(0, len(completions), size)
        ]
        out.append(placed.collect(tickets))
    return out


def test_auto_keeps_the_side_measured_cheaper_for_the_fen_reward_and_a_user_reward_on_the_pool():
    """Which side is cheaper is this machine's business (the rule, fed known costs, is in
    test_placement_rule.py); here: both sides probed, the measured cheaper one kept."""
    batches = [realistic_batch(64, seed=s) for s in range(6)]
    lines: list[str] = []
    fen = FenScorer()
    with RewardPool.create(fen, _cfg(), run_id="place-fen") as pool:
        placed = PlacedRewards(pool, fen, "auto", log=lines.append)
        steps = _steps(placed, batches)
    inline = [s.stats["placement_inline"] for s in steps]
    assert inline[:4] == [0.0, 1.0, 0.0, 1.0]  # the four probe steps: pool, in process, in turn
    decision = placed.decisions[0]
    cheaper = "inline" if decision["inline_ms_per_item"] <= decision["pool_ms_per_item"] else "pool"
    assert decision["where"] == cheaper and "ms/item in process" in lines[0]
    assert inline[4] == (1.0 if cheaper == "inline" else 0.0)  # the step after the decision
    # the next stays there unless its cost moved past the other side's (then logged)
    assert inline[5] == inline[4] or any("measuring again" in line for line in lines), lines
    for (completions, targets), step in zip(batches, steps, strict=True):
        direct = fen.score_batch(completions, targets)
        assert step.values == [r.total for r in direct]  # same rewards either side
        for name in ("validity", "similarity", "exact"):  # and the same component means
            mean = sum(r.components[name] for r in direct) / len(direct)
            assert component_means(step.components)[name] == pytest.approx(mean), (name, inline)
    waiting = FenScorer(RewardConfig(user=[UserRewardSpec(fn="user_rewards:waits_20ms")]))
    with RewardPool.create(waiting, _cfg(concurrency_per_worker=64), run_id="place-io") as pool:
        placed = PlacedRewards(pool, waiting, "auto", log=lines.append)
        steps = _steps(placed, batches[:5])
    # a user reward never runs in the trainer's process under auto: no probe in process, no measuring
    assert [s.stats["placement_inline"] for s in steps] == [0.0] * 5
    assert [d["where"] for d in placed.decisions] == ["pool"]
    assert "user rewards (user_rewards:waits_20ms) run on the pool" in lines[-1]
    assert "pool.placement: inline" in lines[-1]


@pytest.mark.slow
def test_a_reward_that_overruns_in_process_hands_over_to_the_pool():
    reward = RewardConfig(user=[UserRewardSpec(fn="user_rewards:sleeps_forever_on_marker")])
    scorer = FenScorer(reward)
    fen = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
    cfg = _cfg(chunk_size=8, min_chunk_size=2, split_parts=4, chunk_timeout_s=1.0, max_retries=0)
    with RewardPool.create(scorer, cfg, run_id="place-hang") as pool:
        placed = PlacedRewards(pool, scorer, "inline", log=lambda line: None)
        completions = [fen] * 7 + ["HANG " + fen]
        step = placed.collect([placed.submit(completions, [fen] * 8)])
        assert step.statuses == ["ok"] * 7 + [TIMEOUT]
        assert placed.where == "pool" and "pool.chunk_timeout_s=1s" in placed.decisions[-1]["why"]
        again = placed.collect([placed.submit([fen] * 4, [fen] * 4)])
        assert again.statuses == ["ok"] * 4 and again.stats["placement_inline"] == 0.0
        placed.shutdown()


def test_what_a_trl_reward_logs_reaches_the_step_on_the_pool_and_in_process():
    """log_metric's sums and log_extra's per-item values, scored on the pool or in process."""
    reward = RewardConfig(user=[UserRewardSpec(fn="examples.rewards.trl_verl:reverse_reward")])
    scorer = UserRewardScorer(reward)  # no target: the text task's scorer
    completions, rows = ["ba", "bx", "dc", "dc"], [{"prompt": p} for p in ("ab", "ab", "cd", "cd")]
    with RewardPool.create(scorer, _cfg(chunk_size=2, min_chunk_size=2), run_id="place-logged") as pool:
        for where in ("pool", "inline"):
            placed = PlacedRewards(pool, scorer, where, log=lambda line: None)
            tickets = [
                placed.submit(completions[i : i + 2], [None] * 2, fields=rows[i : i + 2]) for i in (0, 2)
            ]
            step = placed.collect(tickets)
            assert step.statuses == ["ok"] * 4, where
            # two calls of two items (3 of 4 reversed exactly), whichever side scored them
            assert step.logged == {"reversed_exactly": (1.5, 2.0)}, where
            # and each item's log_extra values, at its place in the step
            assert step.extras == {i: {"expected": p} for i, p in enumerate(("ba", "ba", "dc", "dc"))}, where
