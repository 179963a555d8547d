"""Rewards of episodes (`trainer.sampling.episodes`), and the figures a step reports about them.

An episode's result becomes one item's reward, as a scorer's would: its status travels with it,
`env_error` and `timeout` count as the error and timeout items of the run's failure policy, and the
episode figures travel as additive stats (`env_*`), turned into means by `episode_figures`.
An environment with its own `aggregate_metrics` (SkyRL's) gets every episode's info instead
(`aggregated_env_metrics`), gathered over the ranks.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainer.grpo.reward_source import Rewards, component_means


def episode_rewards(results: Sequence[Any], env_wait_s: float) -> Rewards:
    """One item per episode result (`.reward`, `.usable`, `.status`, `.turns`, `.env_s`, `.success`)."""
    statuses = [r.status for r in results]
    stats = {
        "reward_items": float(len(results)),
        "reward_errors": float(statuses.count("env_error")),
        "reward_timeouts": float(statuses.count("timeout")),
        "env_episodes": float(len(results)),
        "env_turns": float(sum(r.turns for r in results)),
        "env_seconds": float(sum(r.env_s for r in results)),
        "env_successes": float(sum(bool(r.success) for r in results)),
        "env_max_turns": float(statuses.count("max_turns")),
        "env_max_tokens": float(statuses.count("max_tokens")),
        "env_abandoned": float(statuses.count("abandoned")),
        "env_wait_s": float(env_wait_s),
        "env_replayed_turns": float(sum(getattr(r, "replayed", 0) for r in results)),
        **_metric_sums(results),
    }
    return Rewards(
        values=[float(r.reward) for r in results],
        usable=[bool(r.usable) for r in results],
        statuses=statuses,
        stats=stats,
        # JSON data already (`rewards.env.episode.checked_info`): they cross ranks as they are
        episode_infos=[getattr(r, "episode_info", None) for r in results],
    )


Aggregate = Callable[[list[dict[str, Any]]], Any]


def own_env_metrics(host: Any, scored: Any, gather: Callable[[Any], list[Any]] | None) -> dict[str, Any]:
    """{"env_metrics": ...} from the episode host's `aggregate_metrics` (the environment's own)
    over the step's episodes on every rank; {} where it has none (the mean stands). Every rank
    calls it, as it gathers."""
    aggregate = getattr(host, "aggregate_metrics", None)
    if aggregate is None:
        return {}
    return {"env_metrics": aggregated_env_metrics(scored.episode_infos, aggregate, gather)}


def aggregated_env_metrics(
    infos: Sequence[dict[str, Any] | None],
    aggregate: Aggregate,
    gather: Callable[[Any], list[Any]] | None = None,
) -> dict[str, float]:
    """`aggregate` (an environment's `aggregate_metrics`) over the infos of the episodes that
    reported one (an episode that failed before it could has None): this rank's `infos`, or every
    rank's through `gather` (rank order). What it returns is kept where it is a finite number
    (bools as 0 or 1), as the default mean keeps; anything but a dict is an error."""
    parts = gather(list(infos)) if gather is not None else [list(infos)]
    every = [info for part in parts for info in part if info is not None]
    try:
        out = aggregate(every)
    except Exception as exc:
        raise RuntimeError(
            f"the environment's aggregate_metrics failed on {len(every)} episode infos: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(out, Mapping):
        raise TypeError(f"the environment's aggregate_metrics returned {type(out).__name__}, not a dict")
    return {str(k): float(v) for k, v in out.items() if isinstance(v, numbers.Real) and math.isfinite(v)}


_SUM, _COUNT = "env_metric_sum/", "env_metric_n/"


def _metric_sums(results: Sequence[Any]) -> dict[str, float]:
    """The finite numbers (bools as 0 or 1) at the top of each episode's `episode_info` (SkyRL's
    `get_metrics()`), as additive sums and counts per key."""
    out: dict[str, float] = {}
    for r in results:
        for key, value in (getattr(r, "episode_info", None) or {}).items():
            if isinstance(value, int | float) and math.isfinite(value):
                out[_SUM + key] = out.get(_SUM + key, 0.0) + float(value)
                out[_COUNT + key] = out.get(_COUNT + key, 0.0) + 1.0
    return out


def episode_figures(stats: Mapping[str, float]) -> dict[str, Any]:
    """turns_mean, success_rate, env_step_s (seconds per environment call), env_errors (episodes
    ended by env_error or timeout), env_abandoned (episodes left unplayed after too many of the
    batch failed), env_wait_s and env_replayed_turns (turns replayed to rebuild
    episodes on a replacement worker) of a step's summed episode stats, and env_metrics ({key:
    mean} of what the episodes' `episode_info` reported, where they reported numbers); {} without
    episodes."""
    episodes = stats.get("env_episodes", 0.0)
    if not episodes:
        return {}
    turns = stats.get("env_turns", 0.0)
    counted = (key.removeprefix(_COUNT) for key in stats if key.startswith(_COUNT))
    metrics = component_means({k: (stats.get(_SUM + k, 0.0), stats[_COUNT + k]) for k in counted})
    figures: dict[str, Any] = {
        "turns_mean": turns / episodes,
        "success_rate": stats.get("env_successes", 0.0) / episodes,
        "env_step_s": stats.get("env_seconds", 0.0) / max(turns + episodes, 1.0),  # resets count as calls
        "env_errors": stats.get("reward_errors", 0.0) + stats.get("reward_timeouts", 0.0),
        "env_abandoned": stats.get("env_abandoned", 0.0),
        "env_wait_s": stats.get("env_wait_s", 0.0),
        "env_replayed_turns": stats.get("env_replayed_turns", 0.0),
    }
    if metrics:
        figures["env_metrics"] = metrics
    return figures
