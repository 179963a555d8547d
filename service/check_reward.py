"""`python -m service.check_reward`: a run's rewards measured and tried on its own data, before any run.

    python -m service.check_reward [--config FILE] [--preset NAME] [--set dotted.key=value ...] [--n 200]

Scores `--n` items built from the run's data (each target as a completion, half of it, '' and the
prompt) twice each, on this machine, without Ray, and prints: the cost per item (p50 / p99 / max),
the mix of statuses and the most common errors, how many items scored differently the second time,
and the reward pool the run would use (workers, placement, the chunk size fitted to the cost, the
scoring time of one GRPO step). Exit 0 when a run would accept the rewards, 2 with the reason when
it would refuse them (as `python -m service.train` does), or for a bad config.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Mapping, Sequence

from actors.pool.config import PoolConfig, chunks_for_cost, item_deadline_s
from actors.pool.failure_policy import BatchCounts, expected_dropped_share
from rewards.env.check import env_problem
from service.config import ServiceConfig, load_config
from service.config_keys import ConfigError
from service.preflight import reward_problem
from service.preflight.reward_trial import TrialResult, run_trial, sample_items
from service.preflight.token_ids import encoder_if_needed
from service.presets import DEFAULT_PRESET, PRESETS
from service.tasks import build_task


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m service.check_reward",
        description="Measure and try a run's rewards on its own data before any run.",
    )
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), help=f"starting config (default: {DEFAULT_PRESET})"
    )
    parser.add_argument("--config", metavar="FILE.yaml", help="YAML with any config sections")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.key=value")
    parser.add_argument("--n", type=int, default=200, help="items to score, each twice (default 200)")
    return parser


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _pool_lines(cfg: ServiceConfig, pool: PoolConfig, trial: TrialResult) -> list[str]:
    placement = ", ".join(
        f"{key} {getattr(cfg.pool, key)}"
        for key in ("resources", "label_selector")
        if getattr(cfg.pool, key, None)
    )
    items = cfg.grpo.prompts_per_step * cfg.sampling.group_size
    step_s = items * trial.cost(0.5) / cfg.pool.num_workers
    one_round = math.ceil(items / pool.chunk_size)  # workers that score a step's calls side by side
    return [
        f"pool:         {cfg.pool.num_workers} workers x {cfg.pool.cpus_per_worker:g} CPU"
        + (f" ({placement})" if placement else ""),
        f"calls:        at most {pool.chunk_size} items (configured {cfg.pool.chunk_size}); deadline "
        f"{item_deadline_s(cfg.pool):g}s for an item alone",
        f"a GRPO step:  {items} items, about {_ms(step_s)} of scoring on the pool at p50; "
        f"{one_round} workers would score its calls in one round (pool.num_workers)",
    ]


def component_lines(trial: TrialResult) -> list[str]:
    """Each named component's mean and range over the items that have it (a step reports the same
    means, `reward_components`), and a note for one that gives every item the same value."""
    lines = value_lines("components:", trial.components, "items")
    flat = [
        name for name, values in trial.components.items() if len(values) > 1 and min(values) == max(values)
    ]
    lines += [f"  note: {name} gives every sampled item {trial.components[name][0]:g}: it adds nothing "
              "GRPO can learn from on this sample" for name in flat]  # fmt: skip
    return lines


def value_lines(label: str, values_by_name: Mapping[str, Sequence[float]], of: str) -> list[str]:
    """`label` and, a line each, every name's mean and range over the `of` that have a value."""
    parts = []
    for name, values in values_by_name.items():
        if not values:
            parts.append(f"{name} on no {of[:-1]}")
            continue
        mean = statistics.fmean(values)
        parts.append(f"{name} mean {mean:.3g} in [{min(values):.3g}, {max(values):.3g}] ({len(values)} {of})")
    if not parts:
        return []
    pad = " " * 14
    return [f"{label:<14}{parts[0]}", *(f"{pad}{part}" for part in parts[1:])]


def report(cfg: ServiceConfig, trial: TrialResult, n: int) -> list[str]:
    names = ", ".join(s.fn for s in cfg.reward.user) or "the task's built-in reward only"
    statuses = ", ".join(f"{status} {count}" for status, count in trial.statuses.most_common())
    rewards = f"rewards:      {names} (task {cfg.task.name})"
    if trial.hung is not None and not trial.scored:  # nothing was measured: say where it stopped
        return [rewards, f"sample:       stopped at {trial.hung_item()}: no result within {trial.hung:g}s"]
    lines = [
        rewards,
        f"sample:       {trial.scored} of {n} items, each scored {trial.repeats}x",
        f"cost/item:    p50 {_ms(trial.cost(0.5))}, p99 {_ms(trial.cost(0.99))}, "
        f"max {_ms(max(trial.costs_s, default=0.0))}, mean {_ms(trial.mean_cost)}",
        f"statuses:     {statuses or 'none'}",
    ]
    lines += [f"  error x{count}: {reason[:120]}" for reason, count in trial.errors.most_common(3)]
    lines += component_lines(trial)
    lines += value_lines("log_metric:", trial.logged, "calls")  # a run reports their means, reward_metrics
    counts = BatchCounts.of_statuses(trial.statuses.elements())
    k = cfg.sampling.group_size
    lines.append(
        f"failed:       {counts.failed} of {counts.items} items = {counts.rate:.1%} (a step fails the run above "
        f"pool.error_rate_threshold={cfg.pool.error_rate_threshold:g}); about "
        f"{expected_dropped_share(counts, k):.0%} of a step's groups of {k} would be dropped"
    )
    lines.append(
        f"determinism:  {trial.differing} of {trial.scored} items scored differently the second time"
        + (" (NOT deterministic)" if trial.differing else "")
    )
    if trial.output_bytes:  # captured as a reward worker captures it: shown in a few lines, counted
        head = " | ".join(line[:120] for line in trial.output.splitlines()[:3])
        lines.append(f"output:       {trial.output_bytes} bytes printed by the rewards (captured): {head}")
    return lines + _pool_lines(cfg, chunks_for_cost(cfg.pool, trial.mean_cost), trial)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.n < 1:
            raise ConfigError(f"--n: {args.n} is not allowed; give at least 1 item")
        cfg = load_config(args.preset or DEFAULT_PRESET, args.config, args.overrides)
        from service.train import held_out_eval_pairs

        task = build_task(cfg)
        pairs = task.training_pairs(lambda line: None) or held_out_eval_pairs(task, cfg)
    except (ConfigError, ValueError) as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        return 2
    if task.episodic:
        return _check_environment(task, args.n)
    scorer = task.scorer()
    items = sample_items(pairs, args.n, encoder_if_needed(cfg, task, scorer))
    trial = run_trial(scorer, items, deadline_s=item_deadline_s(cfg.pool), repeats=2)
    print("\n".join(report(cfg, trial, args.n)), flush=True)
    problem = reward_problem(trial, item_deadline_s(cfg.pool), cfg.pool.error_rate_threshold)
    if problem:
        print(f"verdict:      refused: {problem}", flush=True)
        return 2
    print("verdict:      a run would accept these rewards", flush=True)
    return 0


def _check_environment(task, n: int) -> int:
    """An environment task: the environment tried on n training rows, each played twice with its
    demonstration (`service.tasks.env.EnvTask.environment_trial`)."""
    trial = task.environment_trial(n)
    statuses = ", ".join(f"{status} {count}" for status, count in trial.statuses.most_common())
    kind = (
        "deterministic" if task.deterministic else "not declared deterministic (episodes cannot be replayed)"
    )
    played = f"{trial.rows} rows, each played twice with its demonstration"
    if trial.stopped_at:
        played = f"{trial.rows} of {n} rows: stopped at {trial.stopped_at}, past task.step_timeout_s"
    lines = [
        f"environment:  {task.env} (task env), {kind}",
        f"sample:       {played}",
        f"cost/call:    {_ms(trial.step_s)} per reset or step (mean of {trial.calls})",
        f"statuses:     {statuses or 'none'}",
        *(f"  error: {reason[:120]}" for reason in trial.errors[:3]),
        f"infos:        {_info_keys(trial)}",
        # a run's steps and evaluations report these means as env_metrics
        *value_lines("env metrics:", trial.episode_numbers, "episodes"),
        *_aggregated_lines(trial),
        *(f"  note: {reason[:120]}" for reason in trial.notes[:3]),
        f"determinism:  {len(trial.mismatches)} of {trial.rows} rows played differently the second time",
    ]
    print("\n".join(lines), flush=True)
    problem = env_problem(trial)
    if problem:
        print(f"verdict:      refused: {problem}", flush=True)
        return 2
    print("verdict:      a run would accept this environment", flush=True)
    return 0


def _aggregated_lines(trial) -> list[str]:
    """What the environment's own aggregate_metrics made of the sample episodes (a run reports
    that as env_metrics instead of the means)."""
    if trial.aggregated is None or trial.aggregate_error:
        return []
    text = ", ".join(
        f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v!r:.40}" for k, v in trial.aggregated.items()
    )
    return [f"aggregated:   {text or 'nothing'} (the class's aggregate_metrics, a run's env_metrics)"]


def _info_keys(trial) -> str:
    """Which keys the turns' and the episodes' infos held, and how often."""

    def keys(counts, of: int, what: str) -> str:
        return f"{what}: " + (", ".join(f"{k} ({n} of {of})" for k, n in counts.most_common(6)) or "none")

    turns = keys(trial.turn_info_keys, trial.turns, "per turn")
    return f"{turns}; {keys(trial.episode_info_keys, trial.episodes, 'per episode')}"


if __name__ == "__main__":
    sys.exit(main())
