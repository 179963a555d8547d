"""Everything a run can be refused for before anything starts, in one place, used by the driver
(`python -m service.train`, before Ray) and by the client's `submit` (before the job is sent).

    pool_cfg = check_run(cfg, task, eval_set, train_pairs, driver=True, log=print)

Each problem is a `PreflightError` (a `ConfigError`: one line naming the key, exit 2): config
relations (`relations`), records that cannot tokenize or fit (`data`, checked as the task loads
them), and the rewards tried on a sample of the run's data (`reward_trial`): an exception on every
item, a result that is not a number, or a cost per item beyond the pool's deadline. What comes
back is the pool config with chunk sizes fitted to the measured cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from actors.pool.config import PoolConfig, chunks_for_cost, item_deadline_s
from rewards.result import ERROR
from service.config import ConfigError
from service.preflight.relations import relation_problems
from service.preflight.reward_trial import TrialResult, run_trial, sample_items

PREFLIGHT_ITEMS = 8  # sample items scored before a run
PREFLIGHT_BUDGET_S = 3.0  # ...or fewer once this much scoring time is spent (a slow reward)


class PreflightError(ConfigError):
    """A run refused before it starts; str() is one line naming the key."""


def check_relations(cfg: Any, *, driver: bool) -> None:
    problems = relation_problems(cfg, driver=driver)
    if problems:
        raise PreflightError(problems[0])


def reward_problem(trial: TrialResult, deadline_s: float) -> str | None:
    """One line on a reward the run cannot use, from what the trial saw; None when usable."""
    if trial.hung is not None:
        return (
            f"reward: one sample item took longer than {deadline_s:g}s, the pool's deadline for a call "
            "(pool.chunk_timeout_s): every call holding it would be killed"
        )
    odd = next((r for r in trial.errors if "not a number" in r or "non-finite" in r), None)
    if odd is not None:
        return f"reward.user: {odd}; a reward must return a finite float"
    if trial.scored and trial.statuses[ERROR] == trial.scored:
        first = next(iter(trial.errors))
        return f"reward.user: every one of {trial.scored} sample items failed: {first}"
    worst = max(trial.costs_s, default=0.0)
    if worst > deadline_s:
        return (
            f"reward: {worst:.3g}s for one item is beyond the pool's deadline for an item ({deadline_s:g}s)"
        )
    return None


def try_rewards(
    scorer: Any, pairs: Sequence[Any], pool: PoolConfig, *, n: int = PREFLIGHT_ITEMS
) -> TrialResult:
    """Score up to `n` sample items (fewer once PREFLIGHT_BUDGET_S is spent); PreflightError if unusable."""
    deadline_s = item_deadline_s(pool)
    items = sample_items(pairs, n)
    trial = TrialResult()
    for i, item in enumerate(items):
        one = run_trial(scorer, [item], deadline_s=deadline_s, warm_up=i == 0)
        trial.costs_s += one.costs_s
        trial.statuses.update(one.statuses)
        trial.errors.update(one.errors)
        trial.hung = one.hung
        if one.hung is not None or sum(trial.costs_s) >= PREFLIGHT_BUDGET_S:
            break
    problem = reward_problem(trial, deadline_s)
    if problem:
        raise PreflightError(problem)
    return trial


def check_run(
    cfg: Any,
    task: Any,
    eval_set: Sequence[Any],
    train_pairs: Sequence[Any] | None,
    *,
    driver: bool,
    log: Callable[[str], None] = lambda line: None,
) -> PoolConfig:
    """Relations, then the rewards on the run's data; the pool config to run with (chunks fitted)."""
    check_relations(cfg, driver=driver)
    trial = try_rewards(task.scorer(), list(train_pairs or eval_set), cfg.pool)
    cost = trial.mean_cost
    pool = chunks_for_cost(cfg.pool, cost)
    if pool.chunk_size < cfg.grpo.prompts_per_step * cfg.sampling.group_size:  # a step's calls change
        log(
            f"[reward] {cost:.3g}s per item (mean of {len(trial.costs_s)} sample items): calls of at most "
            f"{pool.chunk_size} items, a quarter of pool.chunk_timeout_s ({pool.chunk_timeout_s:g}s)"
        )
    return pool
