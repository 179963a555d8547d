"""Reward workers killed again and again while they hold episodes: the run goes on; the episodes of
a deterministic environment are replayed on the replacement and the run's rewards are those of a
run never disturbed; an environment that is not deterministic loses those episodes as `env_error`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fault_runs import (
    RewardWorkerKiller,
    clean_env,
    driver_run,
    first_difference,
    read_rows,
    run_to_end,
    summary,
)

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 300.0
KILL_EVERY_S = 2.0
MIN_UPTIME_S = 3.0
# env-smoke, warmed up so that episodes last several turns, with enough GRPO steps for kills to land
# mid-episode, and two reward workers holding the episodes.
SETS = (
    "run.backend=local", "run.log_interval_s=0", "sft.steps=60", "sft.lr=0.01", "grpo.steps=24",
    "grpo.prompts_per_step=8", "grpo.eval_every=100", "pool.num_workers=2", "checkpoint.every_steps=100",
)  # fmt: skip


def _argv(run_dir: Path, *more: str) -> list[str]:
    argv = [sys.executable, "-m", "service.train", "--preset", "env-smoke", "--run-dir", str(run_dir)]
    for item in (*SETS, *more):
        argv += ["--set", item]
    return argv


def _killed_run(root: Path, name: str, *more: str) -> tuple[dict, list[dict], int]:
    with driver_run(_argv(root / name, *more), root / f"{name}.log", env=clean_env()) as run:
        run.wait_for_step(61, RUN_TIMEOUT_S)  # the first GRPO step (after 60 SFT): episodes on the workers
        with RewardWorkerKiller(run, KILL_EVERY_S, MIN_UPTIME_S) as killer:
            rc = run.wait(RUN_TIMEOUT_S)
    print(f"{name}: {len(killer.kills)} reward worker kills at steps {[step for _, step in killer.kills]}")
    assert rc == 0, run.tail()
    return summary(root / name), read_rows(root / name / "metrics.jsonl"), len(killer.kills)


def _grpo(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["phase"] == "grpo"]


def test_killed_workers_replay_deterministic_episodes_and_change_no_reward(tmp_path):
    rc, _ = run_to_end(_argv(tmp_path / "reference"), tmp_path / "reference.log", timeout_s=RUN_TIMEOUT_S)
    assert rc == 0
    expected = [
        (r["step"], r["reward_mean"], r["turns_mean"])
        for r in _grpo(read_rows(tmp_path / "reference" / "metrics.jsonl"))
    ]
    s, rows, kills = _killed_run(tmp_path, "killed")
    assert s["status"] == "succeeded" and kills >= 2
    grpo = _grpo(rows)
    assert [(r["step"], r["reward_mean"], r["turns_mean"]) for r in grpo] == expected, first_difference(
        expected, [(r["step"], r["reward_mean"], r["turns_mean"]) for r in grpo]
    )
    assert sum(r["env_replayed_turns"] for r in grpo) > 0, "no episode was replayed: the kills showed nothing"
    assert sum(r["env_errors"] for r in grpo) == 0


def test_killed_workers_end_the_episodes_of_an_undeterministic_environment_as_env_error(tmp_path):
    s, rows, kills = _killed_run(
        tmp_path, "undeterministic", "task.env=tests.service.env_cases:UndeterministicGuess",
        "pool.error_rate_threshold=1.0",  # a step that loses half its episodes goes on, counted
    )  # fmt: skip
    assert s["status"] == "succeeded" and kills >= 2
    grpo = _grpo(rows)
    assert sum(r["env_errors"] for r in grpo) > 0 and sum(r["env_replayed_turns"] for r in grpo) == 0
    assert all(r["env_errors"] == r["scorer_reward_errors"] for r in grpo)  # the failure policy's count
