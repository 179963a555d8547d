"""Summaries of held-out completions: exact match, validity and mean reward of greedy completions;
pass@k and mean@k of k sampled ones."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from trainer.data.pairs import row_fields
from trainer.grpo.reward_source import Rewards, call_scorer


def normalise_scores(out: Any, n: int) -> tuple[list[float], list[str] | None]:
    """(rewards, statuses or None) from what a scorer returned for `n` completions.

    Accepts a `Rewards`, a sequence of numbers, or a sequence of results with `.total` and
    `.status` (what `rewards.score_batch` returns).
    """
    if isinstance(out, Rewards):
        values, statuses = list(out.values), list(out.statuses)
    else:
        items = list(out)
        if items and hasattr(items[0], "total"):
            values = [float(r.total) for r in items]
            statuses = [str(r.status) for r in items] if hasattr(items[0], "status") else None
        else:
            values, statuses = [float(v) for v in items], None
    if len(values) != n:
        raise ValueError(f"scorer returned {len(values)} rewards for {n} completions")
    return values, statuses


def summarise_eval(
    prompts: Sequence[str],
    targets: Sequence[str | None],
    completions: Sequence[str],
    values: Sequence[float],
    statuses: Sequence[str] | None,
    n_samples: int,
    usable: Sequence[bool] | None = None,
) -> dict[str, Any]:
    """exact_match (over the pairs that have a target; None when none has), reward_mean (over every
    item, a failed one counting 0), valid_rate (share of status 'ok'; None without statuses), count,
    and the first `n_samples` examples; with statuses, `statuses` (items per status); with `usable`
    (which items carry a reward), `scored` and `reward_mean_scored` over those alone, so a reward
    that fails is told apart from a policy that does worse."""
    n = len(completions)
    if n == 0:
        raise ValueError("evaluation needs at least one pair")
    finite = [v for v in values if math.isfinite(v)]
    samples = []
    for i in range(min(n_samples, n)):
        sample = {
            "prompt": prompts[i],
            "target": targets[i],
            "completion": completions[i],
            "reward": values[i],
        }
        if statuses is not None:
            sample["status"] = statuses[i]
        samples.append(sample)
    out: dict[str, Any] = {
        "exact_match": exact_match(completions, targets),
        "valid_rate": None if statuses is None else sum(s == "ok" for s in statuses) / n,
        "reward_mean": sum(finite) / len(finite) if finite else float("nan"),
        "count": n,
    }
    if statuses is not None:
        out["statuses"] = dict(Counter(statuses).most_common())
    if usable is not None:
        kept = [v for v, ok in zip(values, usable, strict=True) if ok and math.isfinite(v)]
        out["scored"] = len(kept)
        out["reward_mean_scored"] = sum(kept) / len(kept) if kept else None
    out["samples"] = samples
    return out


def exact_match(completions: Sequence[str], targets: Sequence[str | None]) -> float | None:
    """Share of completions equal to their target once both are stripped (as the reward strips the
    completion), over the items that have a target (None if none has)."""
    pairs = [(c, t) for c, t in zip(completions, targets, strict=True) if t is not None]
    return sum(c.strip() == t.strip() for c, t in pairs) / len(pairs) if pairs else None


def figures_by_group(
    keys: Sequence[str],
    completions: Sequence[str],
    targets: Sequence[str | None],
    values: Sequence[float],
    statuses: Sequence[str] | None,
) -> dict[str, dict[str, Any]]:
    """{key: {count, exact_match, valid_rate, reward_mean}} of the items of each key (e.g. game length)."""
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out = {}
    for key, rows in groups.items():
        finite = [values[i] for i in rows if math.isfinite(values[i])]
        out[key] = {
            "count": len(rows),
            "exact_match": exact_match([completions[i] for i in rows], [targets[i] for i in rows]),
            "valid_rate": None if statuses is None else sum(statuses[i] == "ok" for i in rows) / len(rows),
            "reward_mean": sum(finite) / len(finite) if finite else float("nan"),
        }
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one prompt from n samples of which c passed: 1 - C(n-c, k) / C(n, k)
    (Chen et al. 2021, "Evaluating Large Language Models Trained on Code")."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def sampled_figures(
    values: Sequence[float], usable: Sequence[bool], n: int, k: int, pass_reward: float
) -> dict[str, Any]:
    """pass@1, pass@k and mean@k over prompts with n sampled completions each (laid out prompt after
    prompt). A completion passes when its reward is usable and at least `pass_reward`; mean@k is the
    mean reward of the samples (over usable rewards: a failed one has no reward to average)."""
    if n < 1 or len(values) % n or len(values) != len(usable):
        raise ValueError(f"{len(values)} sampled rewards do not make whole groups of {n}")
    prompts = len(values) // n
    if prompts == 0:
        raise ValueError("pass@k needs at least one prompt")
    tol = 1e-9 * max(1.0, abs(pass_reward))  # a weighted sum of full marks may round just below
    p1 = pk = 0.0
    for i in range(prompts):
        passed = sum(usable[j] and values[j] >= pass_reward - tol for j in range(i * n, (i + 1) * n))
        p1 += pass_at_k(n, passed, 1)
        pk += pass_at_k(n, passed, k)
    scored = [v for v, u in zip(values, usable, strict=True) if u]
    mean = sum(scored) / len(scored) if scored else float("nan")
    return {"k": k, "pass_at_1": p1 / prompts, "pass_at_k": pk / prompts, "mean_at_k": mean}


def _usable(scored: Any) -> list[bool]:
    """Which results carry a reward: `.usable` of scorer results; every finite number otherwise."""
    items = list(scored)
    if items and hasattr(items[0], "usable"):
        return [bool(r.usable) for r in items]
    return [math.isfinite(float(getattr(r, "total", r))) for r in items]


def score_completions(
    pairs: Sequence[Any],
    completions: Sequence[str],
    score_fn,
    k: int,
    token_ids: Sequence[list[int]] | None = None,
) -> tuple[Any, list[float], list[str] | None, list[bool]]:
    """Score k completions of each pair (rows pair after pair; token_ids: each row's sampled ids,
    for rewards that take them): (what the scorer returned, rewards, statuses or None, which
    rewards are usable)."""
    targets = [p.target for p in pairs for _ in range(k)]
    scored = call_scorer(score_fn, list(completions), targets, row_fields(pairs, k, token_ids))
    values, statuses = normalise_scores(scored, len(completions))
    usable = list(scored.usable) if isinstance(scored, Rewards) else _usable(scored)
    return scored, values, statuses, usable


def greedy_summary(
    pairs: Sequence[Any],
    completions: Sequence[str],
    score_fn,
    n_samples: int,
    metrics_fn: Callable[[Any], dict[str, Any]] | None = None,
    group_by: tuple[str, Callable[[str], str]] | None = None,
    token_ids: Sequence[list[int]] | None = None,
) -> dict[str, Any]:
    """`summarise_eval` of one greedy completion per pair, plus what the task's `metrics_fn(scorer
    output)` adds and, with group_by (name, prompt -> key), `by_<name>`: the figures per key."""
    scored, values, statuses, usable = score_completions(pairs, completions, score_fn, 1, token_ids)
    targets = [p.target for p in pairs]
    summary = summarise_eval(
        [p.prompt for p in pairs], targets, completions, values, statuses, n_samples, usable
    )
    if metrics_fn is not None:
        summary.update(metrics_fn(scored))
    if group_by is not None:
        name, key_of = group_by
        keys = [key_of(p.prompt) for p in pairs]
        summary[f"by_{name}"] = figures_by_group(keys, completions, targets, values, statuses)
    return summary


def sampled_summary(
    pairs: Sequence[Any],
    completions: Sequence[str],
    score_fn,
    k: int,
    pass_reward: float,
    token_ids: Sequence[list[int]] | None = None,
) -> dict[str, Any]:
    """`sampled_figures` of k sampled completions per pair."""
    _, values, _, usable = score_completions(pairs, completions, score_fn, k, token_ids)
    return sampled_figures(values, usable, k, k, pass_reward)
