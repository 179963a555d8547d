"""Reward workers killed again and again while they hold episodes: the run goes on; the episodes of
a deterministic environment are replayed on the replacement and the run's rewards are those of a
run never disturbed; an environment that is not deterministic loses those episodes as `env_error`.

The workers are killed from inside, by the environment (`tests.service.env_cases:KillsItsWorker`,
SIGKILL of its own process in the middle of an episode), so that every kill lands while episodes
are held: a kill from outside could land between two steps and show nothing of the replay.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fault_runs import clean_env, driver_run, first_difference, read_rows, summary

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 300.0
CASES = "tests.service.env_cases"
# env-smoke, warmed up so that episodes last several turns, with enough GRPO steps for kills to land
# mid-episode, and two reward workers holding the episodes.
SETS = (
    "run.backend=local", "run.log_interval_s=0", "sft.steps=60", "sft.lr=0.01", "grpo.steps=24",
    "grpo.prompts_per_step=8", "grpo.eval_every=100", "pool.num_workers=2", "checkpoint.every_steps=100",
)  # fmt: skip


def _run(root: Path, name: str, env_class: str, *more: str, kills: bool) -> tuple[dict, list[dict], int]:
    """A run of `env_class`, whose workers kill themselves when `kills`: (summary, metrics and
    evaluation rows, the kills made)."""
    run_dir, kill_dir = root / name, root / f"{name}-kills"
    argv = [sys.executable, "-m", "service.train", "--preset", "env-smoke", "--run-dir", str(run_dir)]
    for item in (*SETS, f"task.env={CASES}:{env_class}", *more):
        argv += ["--set", item]
    env = clean_env()
    if kills:
        kill_dir.mkdir()
        env["GRPO_TEST_KILL_DIR"] = str(kill_dir)
    with driver_run(argv, root / f"{name}.log", env=env) as run:
        rc = run.wait(RUN_TIMEOUT_S)
        assert rc == 0, run.tail()
    rows = read_rows(run_dir / "metrics.jsonl") + read_rows(run_dir / "eval.jsonl")
    return summary(run_dir), rows, len(list(kill_dir.glob("kill-*"))) if kills else 0


def _rewards(rows: list[dict]) -> list[tuple]:
    return [
        (r["phase"], r["step"], r.get("reward_mean"), r.get("turns_mean")) for r in rows if "turns_mean" in r
    ]


def test_killed_workers_replay_deterministic_episodes_and_change_no_reward(tmp_path):
    _, reference, _ = _run(tmp_path, "reference", "KillsItsWorker", kills=False)
    s, rows, kills = _run(tmp_path, "killed", "KillsItsWorker", kills=True)
    print(f"killed: {kills} reward worker kills")
    assert s["status"] == "succeeded" and kills >= 2
    expected, got = _rewards(reference), _rewards(rows)
    assert got == expected, first_difference(expected, got)
    assert sum(r.get("env_replayed_turns", 0) for r in rows) > 0, "no episode was replayed"
    assert sum(r.get("env_errors", 0) for r in rows) == 0


def test_killed_workers_end_the_episodes_of_an_undeterministic_environment_as_env_error(tmp_path):
    s, rows, kills = _run(
        tmp_path, "undeterministic", "UndeterministicKillsItsWorker",
        "pool.error_rate_threshold=1.0",  # a step that loses half its episodes goes on, counted
        kills=True,
    )  # fmt: skip
    assert s["status"] == "succeeded" and kills >= 2
    grpo = [r for r in rows if r["phase"] == "grpo" and "loss" in r]
    assert (
        sum(r.get("env_errors", 0) for r in rows) > 0
        and sum(r.get("env_replayed_turns", 0) for r in rows) == 0
    )
    assert all(r["env_errors"] == r["scorer_reward_errors"] for r in grpo)  # the failure policy's count
