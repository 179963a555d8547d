"""Everything a run can be refused for before anything starts, in one place, used by the driver
(`python -m service.train`, before Ray) and by the client's `submit` (before the job is sent).

    pool_cfg = check_run(cfg, task, eval_set, train_pairs, driver=True, log=print)

Each problem is a `PreflightError` (a `ConfigError`: one line naming the key, exit 2): config
relations (`relations`), records that cannot tokenize or fit (`data`, checked as the task loads
them), and the rewards tried on a sample of the run's data (`reward_trial`): an exception on every
item, a result that is not a number, more failed items than `pool.error_rate_threshold` allows
(`actors.pool.failure_policy`, the rule of every GRPO step), or a cost per item beyond the pool's
deadline. What comes
back is the pool config with chunk sizes fitted to the measured cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from actors.pool.config import PoolConfig, chunks_for_cost, item_deadline_s
from actors.pool.failure_policy import BatchCounts, error_rate_problem
from rewards.result import ERROR, TIMEOUT
from service.config_keys import ConfigError
from service.preflight.relations import relation_problems
from service.preflight.reward_trial import TrialResult, run_trial, sample_items
from service.preflight.token_ids import Encoder, encoder_if_needed

PREFLIGHT_ITEMS = 8  # sample items scored before a run
PREFLIGHT_RATE_ITEMS = 64  # ...or this many when some of them failed, to measure the failed share
PREFLIGHT_BUDGET_S = 3.0  # ...or fewer once this much scoring time is spent (a slow reward)


class PreflightError(ConfigError):
    """A run refused before it starts; str() is one line naming the key."""


def check_relations(cfg: Any, *, driver: bool) -> None:
    problems = relation_problems(cfg, driver=driver)
    if problems:
        raise PreflightError(problems[0])


def reward_problem(trial: TrialResult, deadline_s: float, error_rate_threshold: float) -> str | None:
    """One line on a reward the run cannot use, from what the trial saw; None when usable."""
    if trial.hung is not None:
        return (
            f"reward: {trial.hung_item()} did not return within {deadline_s:g}s, the pool's deadline "
            "for a call (pool.chunk_timeout_s): every call holding it would be killed"
        )
    odd = next((r for r in trial.errors if "not a number" in r), None)
    if odd is not None:
        return f"reward.user: {odd}; a reward must return a finite float"
    if trial.scored and trial.statuses[ERROR] == trial.scored:
        first = next(iter(trial.errors))
        return f"reward.user: every one of {trial.scored} sample items failed: {first}"
    too_many = error_rate_problem(BatchCounts.of_statuses(trial.statuses.elements()), error_rate_threshold)
    if too_many is not None:
        first = trial.errors.most_common(1)[0][0] if trial.errors else "-"
        return (
            f"reward: {too_many} on the sample of the run's data, as a GRPO step with them would fail "
            f"the run; most common: {first}"
        )
    worst = max(trial.costs_s, default=0.0)
    if worst > deadline_s:
        return (
            f"reward: {worst:.3g}s for one item is beyond the pool's deadline for an item ({deadline_s:g}s)"
        )
    return None


def try_rewards(
    scorer: Any,
    pairs: Sequence[Any],
    pool: PoolConfig,
    *,
    n: int = PREFLIGHT_ITEMS,
    encode: Encoder | None = None,
) -> TrialResult:
    """Score up to `n` sample items (fewer once PREFLIGHT_BUDGET_S is spent); PreflightError if
    unusable. encode: each sample completion's token ids, for rewards that take them."""
    deadline_s = item_deadline_s(pool)
    trial = _trial(scorer, sample_items(pairs, n, encode), deadline_s)
    failed = trial.statuses[ERROR] + trial.statuses[TIMEOUT]
    if 0 < failed < trial.scored and trial.hung is None and n < PREFLIGHT_RATE_ITEMS:
        # Some items failed: a share measured on a few items is too coarse to hold against
        # pool.error_rate_threshold, so it is measured again on more (as long as the budget lasts).
        trial = _trial(scorer, sample_items(pairs, PREFLIGHT_RATE_ITEMS, encode), deadline_s)
    problem = reward_problem(trial, deadline_s, pool.error_rate_threshold)
    if problem:
        raise PreflightError(problem)
    return trial


def _trial(scorer: Any, items: Sequence[Any], deadline_s: float) -> TrialResult:
    """Score `items` one at a time until they are done, one hangs or PREFLIGHT_BUDGET_S is spent."""
    trial = TrialResult()
    for i, item in enumerate(items):
        one = run_trial(scorer, [item], deadline_s=deadline_s, warm_up=i == 0)
        trial.costs_s += one.costs_s
        trial.statuses.update(one.statuses)
        trial.errors.update(one.errors)
        trial.hung = one.hung
        if one.hung is not None or sum(trial.costs_s) >= PREFLIGHT_BUDGET_S:
            break
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
    if task.episodic:  # an environment task: its environment is tried instead, on its training rows
        problem = task.environment_problem()
        if problem:
            raise PreflightError(f"task.env: {problem}")
        return cfg.pool
    scorer = task.scorer()
    encode = encoder_if_needed(cfg, task, scorer)
    trial = try_rewards(scorer, list(train_pairs or eval_set), cfg.pool, encode=encode)
    cost = trial.mean_cost
    pool = chunks_for_cost(cfg.pool, cost)
    if pool.chunk_size < cfg.grpo.prompts_per_step * cfg.sampling.group_size:  # a step's calls change
        log(
            f"[reward] {cost:.3g}s per item (mean of {len(trial.costs_s)} sample items): calls of at most "
            f"{pool.chunk_size} items, a quarter of pool.chunk_timeout_s ({pool.chunk_timeout_s:g}s)"
        )
    return pool
