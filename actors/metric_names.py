"""Every metric of a run, named once: the record keys, their logger names and their Prometheus series.

One list feeds the files, the loggers, the exporter and the dashboard:

    metrics.jsonl / eval.jsonl   the record keys (`reward_mean`, `sample_s`, ...), flat, as written
    TensorBoard / W&B            `<group>/<name>`: `train/reward_mean`, `time/sample_s`, `pool/timeouts`,
                                 `eval/exact_match` (groups: train, time, pool, eval)
    Prometheus (Ray's export)    `ray_` + the series below, e.g. `ray_grpo_reward_mean`
    deploy/grafana               panels generated from these series (`python -m service.dashboard`)

Pure data: no Ray, so the driver's loggers and the report can read it without starting anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GROUPS = ("train", "time", "pool", "eval")
Group = Literal["train", "time", "pool", "eval"]
PROMETHEUS_PREFIX = "ray_"  # Ray puts it in front of every application metric


@dataclass(frozen=True)
class Metric:
    """One number of a step or evaluation record."""

    key: str  # the record's key in metrics.jsonl / eval.jsonl
    group: Group
    description: str
    short: str | None = None  # the logger name after the group (default: the key)
    series: str | None = None  # a Ray gauge of this value (tags run_id, phase); None: not exported
    tag: str | None = None  # a {name: number} figure: its gauge has this tag as well, one series per name

    @property
    def name(self) -> str:
        """The logger name: `<group>/<short>`."""
        return f"{self.group}/{self.short or self.key}"


def _m(
    key: str,
    group: Group,
    description: str,
    short: str | None = None,
    export: bool = False,
    tag: str | None = None,
) -> Metric:
    series = None
    if export:
        series = f"grpo_eval_{key}" if group == "eval" else f"grpo_{key}"
    return Metric(key, group, description, short, series, tag)


# Keys of a step record (metrics.jsonl), SFT and GRPO alike; a phase leaves out what it lacks.
STEP_METRICS: tuple[Metric, ...] = (
    _m("step", "train", "global step just finished (SFT and GRPO share one counter)", export=True),
    _m("loss", "train", "training loss of the step", export=True),
    _m("reward_mean", "train", "mean reward of the step's sampled completions", export=True),
    _m("kl", "train", "KL(policy || reference), grpo.kl_estimator, token mean", export=True),
    _m("entropy", "train", "policy entropy of sampled tokens", export=True),
    _m("clip_frac", "train", "share of tokens whose ratio was clipped"),
    _m("grad_norm", "train", "gradient norm before clipping"),
    _m("lr", "train", "learning rate of the step"),
    _m("skipped", "train", "1 when the update was skipped (non-finite loss or gradients)"),
    _m("consecutive_skips", "train", "updates skipped in a row"),
    _m("empty_update", "train", "1 when every group was dropped (no optimiser step)"),
    _m("sampler_logprob_gap", "train", "mean |sampler - trainer| log-prob of sampled tokens"),
    _m(
        "policy_version",
        "train",
        "GRPO updates the policy that sampled the step had taken (its weights' version)",
    ),
    _m(
        "staleness",
        "train",
        "updates between the sampling policy and the one trained (at most grpo.max_staleness)",
    ),
    _m(
        "is_weight_mean",
        "train",
        "mean importance weight (trained / sampling policy, clamped) over sampled tokens",
    ),
    _m("is_weight_max", "train", "largest importance weight of the step after clamping"),
    _m("is_clip_frac", "train", "share of sampled tokens whose importance weight was clamped"),
    _m("tokens", "train", "tokens trained on"),
    _m("sequences", "train", "SFT pairs in the step"),
    _m("completions", "train", "completions sampled in the step"),
    _m("zero_var_frac", "train", "share of groups whose rewards were all equal"),
    _m("dropped_groups", "train", "groups left out of the update"),
    _m("unusable_groups", "train", "groups with a reward that could not be used"),
    _m("refill_rounds", "train", "extra sampling rounds of dynamic sampling (grpo.dynamic_sampling_tries)"),
    _m("refill_prompts", "train", "extra prompts drawn by dynamic sampling"),
    _m("skipped_groups", "train", "groups with an item a reward skipped (returned None), left out"),
    _m("groups", "train", "prompt groups sampled in the step"),
    _m("reward_ok_frac", "train", "share of completions scored with status ok"),
    _m("truncated_frac", "train", "share of completions cut at sampling.max_new_tokens (no EOS)"),
    _m(
        "kl_reward_penalty",
        "train",
        "mean beta * summed KL taken from each reward (grpo.kl_placement=reward)",
    ),
    _m(
        "reward_components",
        "train",
        "{component: mean} of the scorer's named components (each user reward; validity, similarity, "
        "exact for fen; legal, quality, cp_loss for move; passed, total for code) over the items that "
        "have it, over every rank's completions",
        "rewards",
        export=True,
        tag="component",
    ),
    _m(
        "reward_metrics",
        "train",
        "{name: mean} of what TRL-style rewards logged with log_metric(name, value) during the step, "
        "over the calls that logged the name",
    ),
    _m("turns_mean", "train", "environment tasks: mean actions per episode", export=True),
    _m(
        "success_rate",
        "train",
        "environment tasks: share of episodes the environment ended with a positive reward",
    ),
    _m("env_errors", "train", "environment tasks: episodes ended by env_error or timeout", export=True),
    _m(
        "env_abandoned",
        "train",
        "environment tasks: episodes left unplayed once more than pool.error_rate_threshold of the "
        "batch had ended env_error or timeout",
    ),
    _m(
        "env_metrics",
        "train",
        "environment tasks: {key: mean} of the numbers the episodes' episode_info() reported "
        "(SkyRL's get_metrics), over the episodes that reported the key; or what the environment's "
        "own aggregate_metrics made of every episode's info",
    ),
    _m(
        "env_replayed_turns", "train", "environment tasks: turns replayed to rebuild episodes on a new worker"
    ),
    _m("step_time_s", "time", "wall time of the step", export=True),
    _m("sample_s", "time", "sampling the step's completions", export=True),
    _m("reward_wait_s", "time", "time the step blocked waiting for rewards", export=True),
    _m("ref_s", "time", "reference model log-probs", export=True),
    _m("update_s", "time", "the policy update", export=True),
    _m("completions_per_s", "time", "completions sampled and scored per second (per rank)", export=True),
    _m("env_step_s", "time", "environment tasks: mean seconds of one reset or step", export=True),
    _m("env_wait_s", "time", "environment tasks: time sampling waited on the environments"),
    _m("scorer_reward_items", "pool", "items the reward pool scored for the step", "items"),
    _m("scorer_reward_errors", "pool", "items with status error", "errors"),
    _m("scorer_reward_timeouts", "pool", "items whose call passed its deadline", "timeouts"),
    _m("scorer_reward_retries", "pool", "chunks dispatched again after a fault", "retries"),
    _m("scorer_reward_deadline_kills", "pool", "workers killed for passing a deadline", "deadline_kills"),
    _m("scorer_worker_restarts", "pool", "reward worker restarts seen during the step", "worker_restarts"),
    _m(
        "scorer_worker_recycled",
        "pool",
        "reward workers replaced during the step for passing pool.max_worker_rss_mb",
        "worker_recycled",
    ),
    _m("scorer_reward_wait_s", "pool", "time blocked collecting the step's rewards", "wait_s"),
    _m("scorer_reward_items_per_s", "pool", "items the pool scored per second", "items_per_s"),
    _m(
        "scorer_placement_inline",
        "pool",
        "1 when the step's rewards were scored in process (pool.placement)",
        "inline",
    ),
    _m(
        "scorer_placement_inline_ms_per_item",
        "pool",
        "last measured cost of scoring in process, per item",
        "inline_ms",
    ),
    _m(
        "scorer_placement_pool_ms_per_item",
        "pool",
        "last measured cost of scoring on the pool, per item",
        "pool_ms",
    ),
    _m("pool_workers", "pool", "reward workers of the pool", "workers", export=True),
    _m(
        "pool_seconds_per_item",
        "pool",
        "the workers' measured scoring time per item (an autoscaled pool's)",
        "seconds_per_item",
    ),
    _m("pool_roster_version", "pool", "the autoscaled pool's roster the ranks follow", "roster_version"),
    _m(
        "pool_resized_from",
        "pool",
        "an autoscaled pool's size before the change first run at this step",
        "resized_from",
    ),
    _m(
        "pool_resized_to",
        "pool",
        "an autoscaled pool's size after the change first run at this step",
        "resized_to",
    ),
    _m("pool_resize_step", "pool", "the step whose record decided that change", "resize_step"),
    _m("pool_workers_alive", "pool", "reward workers taking work at the end of the step", "workers_alive"),
    _m(
        "pool_worker_rss_mb_max",
        "pool",
        "largest resident memory (MB) of a reward worker after its last call, at the end of the step",
        "worker_rss_mb_max",
    ),
)

# Keys of an evaluation record (eval.jsonl): the held-out figures.
EVAL_METRICS: tuple[Metric, ...] = (
    _m("reward_mean", "eval", "held-out mean reward of greedy completions", export=True),
    _m("exact_match", "eval", "held-out share of completions equal to their target", export=True),
    _m("valid_rate", "eval", "held-out share of completions scored with status ok", export=True),
    _m("count", "eval", "held-out pairs evaluated"),
    _m("scored", "eval", "held-out completions whose reward could be computed (not error or timeout)"),
    _m("reward_mean_scored", "eval", "held-out mean reward over the scored completions only"),
    _m("k", "eval", "completions sampled per held-out prompt for pass@k"),
    _m("pass_at_1", "eval", "pass@1 estimated from the k sampled completions"),
    _m("pass_at_k", "eval", "share of prompts with at least one exact completion among k"),
    _m("mean_at_k", "eval", "mean reward of the k sampled completions"),
    _m("success_rate", "eval", "environment tasks: held-out share of episodes won", export=True),
    _m("turns_mean", "eval", "environment tasks: held-out mean actions per episode", export=True),
    _m("env_errors", "eval", "environment tasks: held-out episodes ended by env_error or timeout"),
    _m("env_abandoned", "eval", "environment tasks: held-out episodes left unplayed after too many failed"),
    _m(
        "env_metrics",
        "eval",
        "environment tasks: {key: mean} of the held-out episodes' episode_info() numbers, or the "
        "environment's own aggregate_metrics of them",
    ),
    _m("env_step_s", "eval", "environment tasks: held-out mean seconds of one reset or step"),
    _m("env_wait_s", "eval", "environment tasks: held-out time sampling waited on the environments"),
    _m("env_replayed_turns", "eval", "environment tasks: held-out turns replayed on a new worker"),
    _m(
        "reward_components",
        "eval",
        "{component: mean} of the scorer's named components over the held-out greedy completions",
        "rewards",
    ),
    _m("by_plies", "eval", "held-out figures by game length in plies (the fen task): {plies: {count, ...}}"),
    _m("eval_time_s", "time", "wall time of the evaluation", "eval_s"),
)

# Record keys that are not metrics: position, identity and payload.
RECORD_FIELDS = frozenset(
    {"step", "phase", "time", "kind", "samples", "skip_reason", "statuses", "reward_failure_reasons"}
)

# Counters of the run (Prometheus adds `_total`).
STEPS_COUNTER = ("grpo_steps", "optimiser steps finished")
SKIPPED_COUNTER = ("grpo_skipped_steps", "steps whose update was skipped (non-finite loss or gradients)")
RUN_TAG_KEYS = ("run_id", "phase")


@dataclass(frozen=True)
class PoolSeries:
    """One series the reward pool exports itself (`actors.pool.metrics`)."""

    series: str
    kind: Literal["counter", "gauge", "histogram"]
    description: str
    per_worker: bool = False  # tagged `worker` (the actor name) as well as `run_id`


POOL_SERIES: dict[str, PoolSeries] = {
    s.series: s
    for s in (
        PoolSeries("reward_pool_items", "counter", "items scored", per_worker=True),
        PoolSeries("reward_pool_errors", "counter", "items with status error", per_worker=True),
        PoolSeries("reward_pool_timeouts", "counter", "calls that passed their deadline", per_worker=True),
        PoolSeries("reward_pool_worker_restarts", "counter", "worker processes restarted", per_worker=True),
        PoolSeries(
            "reward_pool_worker_recycled",
            "counter",
            "worker processes replaced past pool.max_worker_rss_mb",
            per_worker=True,
        ),
        PoolSeries(
            "reward_pool_worker_rss_mb",
            "gauge",
            "worker resident memory after its last call",
            per_worker=True,
        ),
        PoolSeries("reward_pool_retries", "counter", "chunks dispatched again after a fault"),
        PoolSeries("reward_pool_queue_depth", "gauge", "items queued or in flight"),
        PoolSeries("reward_pool_items_per_s", "gauge", "items scored per second (last 10 s)"),
        PoolSeries("reward_pool_wait_s", "histogram", "time the caller blocked in collect"),
    )
}

METRIC_NAMES: tuple[str, ...] = (
    *(m.series for m in (*STEP_METRICS, *EVAL_METRICS) if m.series),
    STEPS_COUNTER[0],
    SKIPPED_COUNTER[0],
)


# Keys only an environment task's records carry (episodes); other runs export none of them.
EPISODE_KEYS = frozenset(
    {
        "turns_mean",
        "success_rate",
        "env_errors",
        "env_abandoned",
        "env_step_s",
        "env_wait_s",
        "env_replayed_turns",
        "env_metrics",
    }
)


def episode_series() -> set[str]:
    """The Prometheus names of the series only an environment task's run exports."""
    return {
        prometheus_name(m.series)
        for m in (*STEP_METRICS, *EVAL_METRICS)
        if m.series and m.key in EPISODE_KEYS
    }


def prometheus_name(series: str, kind: str = "gauge") -> str:
    """The name Prometheus shows: Ray's prefix, and `_total` on counters."""
    return PROMETHEUS_PREFIX + series + ("_total" if kind == "counter" else "")


_BY_KEY = {
    "step": {m.key: m for m in STEP_METRICS},
    "eval": {m.key: m for m in EVAL_METRICS},
}


def metric_for(record_kind: Literal["step", "eval"], key: str) -> Metric | None:
    """The catalogue entry of `key` in a step or eval record (None for a key it does not list)."""
    return _BY_KEY[record_kind].get(key)


def logger_name(record_kind: Literal["step", "eval"], key: str) -> str:
    """`<group>/<name>` of a record key; a key the catalogue lacks keeps its record's group."""
    metric = metric_for(record_kind, key)
    if metric is not None:
        return metric.name
    return f"{'eval' if record_kind == 'eval' else 'train'}/{key}"
