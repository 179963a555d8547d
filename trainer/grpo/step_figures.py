"""What a GRPO step's record says about its rewards, over every rank's rows.

Under data parallelism each rank holds a share of the step's groups. The record's reward figures
(reward_mean, reward_ok_frac, the group counts, reward_components, reward_metrics, the pool's
counts, the episodes' figures) describe the whole step, as the loss does: each rank adds up sums
over its rows, the ranks exchange them once, and every rank turns the same totals into the same
means.
At world size 1 nothing is exchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from trainer.grpo.episode_rewards import episode_figures
from trainer.grpo.reward_source import Rewards, component_means
from trainer.grpo.selection import GroupSelection
from trainer.grpo.shaping import Shaped

_PART_SUM, _PART_COUNT, _STAT = "part_sum/", "part_count/", "stat/"
_LOGGED_SUM, _LOGGED_COUNT = "logged_sum/", "logged_count/"

# How the pool's and the episodes' stats (`Rewards.stats`) combine over ranks. Counts of items are
# summed; time blocked is the slowest rank's (the ranks wait side by side); a worker restart is seen
# by every rank's front-end to the shared workers, so the most any rank saw; a rank's placement
# choice and its costs are averaged. Everything else is summed.
_MAX_STATS = frozenset({"reward_wait_s", "env_wait_s", "worker_restarts"})
_MEAN_STAT_PREFIX = "placement_"

# One rank's sums -> every rank's sums, in rank order (trainer.distributed.gather_json).
Gather = Callable[[dict[str, float]], list[dict[str, float]]]


def rank_sums(shaped: Shaped, sel: GroupSelection, scored: Rewards, group_size: int) -> dict[str, float]:
    """This rank's additive figures of a step. The reward mean is the task's own reward (before
    overlong or KL shaping) over the rows of usable groups, as advantages see them."""
    usable_groups = torch.tensor(scored.usable).view(-1, group_size).all(dim=1)
    in_usable = usable_groups.repeat_interleave(group_size).tolist()
    task_values = [v for v, u in zip(scored.values, in_usable, strict=True) if u]
    sums = {
        "reward_sum": float(sum(task_values)),
        "reward_rows": float(len(task_values)),
        "groups": float(sel.num_groups),
        "zero_var_groups": float(sel.zero_var_groups),
        "dropped_groups": float(sel.dropped_groups),
        "unusable_groups": float(sel.unusable_groups),
        "skipped_groups": float(sel.skipped_groups),
        "completions": float(len(scored.values)),
        "ok": float(sum(s == "ok" for s in scored.statuses)),
        "truncated": float(shaped.truncated.sum()),
        "kl_penalty": float(shaped.kl_penalty.sum()),
    }
    for name, (total, count) in scored.components.items():
        sums[_PART_SUM + name], sums[_PART_COUNT + name] = float(total), float(count)
    for name, (total, count) in scored.logged.items():
        sums[_LOGGED_SUM + name], sums[_LOGGED_COUNT + name] = float(total), float(count)
    sums.update({_STAT + k: float(v) for k, v in scored.stats.items()})
    return sums


def _means(sums: Mapping[str, float], sum_prefix: str, count_prefix: str) -> dict[str, float]:
    """{name: sum / count} of the names counted under the prefixes (a name never counted is left out)."""
    names = [k.removeprefix(count_prefix) for k in sums if k.startswith(count_prefix)]
    return component_means({n: (sums[sum_prefix + n], sums[count_prefix + n]) for n in names})


def combined(per_rank: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The ranks' sums as one rank's: each key summed, except the stats named above (max, mean);
    a key some rank lacks combines over the ranks that have it."""
    keys = dict.fromkeys(k for sums in per_rank for k in sums)
    out = {}
    for key in keys:
        values = [sums[key] for sums in per_rank if key in sums]
        stat = key.removeprefix(_STAT)
        if key.startswith(_STAT) and stat in _MAX_STATS:
            out[key] = max(values)
        elif key.startswith(_STAT) and stat.startswith(_MEAN_STAT_PREFIX):
            out[key] = sum(values) / len(values)
        else:
            out[key] = sum(values)
    return out


def step_figures(sums: Mapping[str, float]) -> dict[str, Any]:
    """The record's reward figures from a step's sums (one rank's, or `combined` over ranks)."""
    groups, rows = sums["groups"], sums["completions"]
    figures: dict[str, Any] = {
        "reward_mean": sums["reward_sum"] / sums["reward_rows"] if sums["reward_rows"] else None,
        "zero_var_frac": sums["zero_var_groups"] / groups,
        "dropped_groups": sums["dropped_groups"],
        "unusable_groups": sums["unusable_groups"],
        "skipped_groups": sums["skipped_groups"],
        "groups": groups,
        "completions": rows,
        "reward_ok_frac": sums["ok"] / rows,
        "truncated_frac": sums["truncated"] / rows,
        "kl_reward_penalty": sums["kl_penalty"] / rows,
    }
    if parts := _means(sums, _PART_SUM, _PART_COUNT):
        figures["reward_components"] = parts
    if logged := _means(sums, _LOGGED_SUM, _LOGGED_COUNT):
        figures["reward_metrics"] = logged  # TRL-style rewards' log_metric values
    stats = {k.removeprefix(_STAT): v for k, v in sums.items() if k.startswith(_STAT)}
    figures.update({f"scorer_{k}": v for k, v in stats.items() if not k.startswith("env_")})
    figures.update(episode_figures(stats))  # the env_ stats as means
    return figures


def step_sums(
    shaped: Shaped, sel: GroupSelection, scored: Rewards, group_size: int, gather: Gather | None
) -> dict[str, float]:
    """The step's sums over every rank (gather None: this rank's rows are the whole step)."""
    mine = rank_sums(shaped, sel, scored, group_size)
    return combined(gather(mine)) if gather is not None else mine
