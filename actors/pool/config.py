"""Typed, frozen config of the reward pool, and the values derived from it.

`PoolConfig` says how many reward workers run, how big a unit of work is, how long one may take
and what happens when it does not finish. The reward itself is configured separately
(`rewards.RewardConfig`); the service composes the two (`reward:` and `pool:` sections).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from actors.pool.node_resources import check_custom_resources, check_label_selector
from trainer.config_base import Frozen

# Ray actor names: keep them readable in the dashboard and free of separators Ray treats specially.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


class AutoscaleConfig(Frozen):
    """`pool.autoscale`: the pool's size follows the trainer's wait for rewards (`actors.pool.autoscale`)."""

    min_workers: int = Field(1, ge=1, description="fewest reward workers the pool shrinks to")
    max_workers: int = Field(8, ge=1, description="most reward workers the pool grows to")
    target_wait_share: float = Field(
        0.2,
        gt=0.0,
        lt=1.0,
        description="share of a GRPO step spent waiting for rewards the pool aims under: above it the "
        "pool grows, below half of it with workers to spare it shrinks",
    )
    cooldown_steps: int = Field(
        2,
        ge=1,
        description="GRPO steps in a row at the pool's current size that must agree before it changes",
    )

    @model_validator(mode="after")
    def _check(self) -> AutoscaleConfig:
        if self.min_workers > self.max_workers:
            raise ValueError(f"min_workers ({self.min_workers}) must be <= max_workers ({self.max_workers})")
        return self


class PoolConfig(Frozen):
    """The reward pool: M CPU actors scoring chunks of completions, with deadlines and retries."""

    num_workers: int = Field(2, ge=1, description="reward worker actors")
    cpus_per_worker: float = Field(0.5, gt=0.0, description="logical CPUs Ray reserves per worker")
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Ray custom resources each worker takes, e.g. {reward_node: 1}: workers then run only "
        "on nodes started with that resource (`ray start --resources`)",
    )
    label_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Ray node labels a worker's node must carry, e.g. {grpo.io/role: reward} "
        "(`ray start --labels`; values 'v', '!v', 'in(a,b)')",
    )
    # A call costs about a millisecond of dispatch and each item about a microsecond of result encoding,
    # so small chunks lose to scoring in process and large ones pay (bench/pool_workload.py measures both).
    chunk_size: int = Field(2048, ge=1, description="most items per call")
    min_chunk_size: int = Field(
        64, ge=1, description="a submission is spread over idle workers only in pieces at least this big"
    )
    spread_min_s: float = Field(
        0.002,
        ge=0.0,
        description="a submission is spread over workers only in pieces that take at least this long to "
        "score at the cost per item the workers measure (a call costs about 1 ms on its own); 0: by "
        "min_chunk_size alone",
    )
    max_in_flight_per_worker: int = Field(
        2, ge=1, description="calls queued on one worker; 2 keeps it busy while a result travels back"
    )
    chunk_timeout_s: float = Field(10.0, gt=0.0, description="hard deadline of one call once it is running")
    placement: Literal["auto", "inline", "pool"] = Field(
        "auto",
        description="where a GRPO step's rewards are scored: measured and chosen (auto), in the trainer's process, or on the pool",
    )
    concurrency_per_worker: int = Field(
        16,
        ge=1,
        le=4096,
        description="items one worker scores at once when a user reward is async def or asks for threads",
    )
    item_timeout_s: float | None = Field(
        None,
        gt=0.0,
        description="deadline of one item of an async or threaded reward (status timeout; default chunk_timeout_s / 2)",
    )
    max_retries: int = Field(
        1, ge=0, description="re-runs of a single item after it timed out or its worker died, before it fails"
    )
    split_parts: int = Field(
        16, ge=2, description="pieces a timed-out chunk is cut into to isolate a poison item"
    )
    error_rate_threshold: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="a GRPO step (and check_reward's and the preflight's sample) fails the run when more "
        "than this fraction of its rewards errored (raised, NaN) or timed out",
    )
    max_dropped_share: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="a run whose failed or skipped rewards dropped more than this fraction of its GRPO "
        "groups ends with a warning in its summary (it still succeeds)",
    )
    max_reward_wait_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="a run whose GRPO steps spent more than this fraction of their time waiting for "
        "rewards ends with a warning in its summary (it still succeeds)",
    )
    collect_timeout_s: float = Field(600.0, gt=0.0, description="longest a collect waits before failing")
    start_timeout_s: float = Field(120.0, gt=0.0, description="longest the workers may take to start")
    restart_timeout_s: float = Field(
        60.0,
        gt=0.0,
        description="longest a killed worker may take to come back (on another node when its own is "
        "gone); the run fails once every worker has been gone this long",
    )
    max_restarts: int = Field(
        -1,
        ge=-1,
        description="Ray restarts of one worker actor (-1: unlimited; every deadline kill uses one)",
    )
    max_worker_rss_mb: float | None = Field(
        None,
        gt=0.0,
        description="a reward worker whose resident memory (RSS) passes this many MB after a call finishes "
        "that call and is replaced by a fresh process, its work kept (as Celery's "
        "worker_max_memory_per_child; counted as `recycled`); none: never",
    )
    rss_warn_growth_mb: float = Field(
        256.0,
        gt=0.0,
        description="the console warns once about a reward worker whose RSS grew more than this many MB "
        "above its first GRPO step's figure (a reward that leaks memory)",
    )
    rss_warn_rising_steps: int = Field(
        8,
        ge=2,
        description="the console warns once about a reward worker whose RSS rose (by more than 4 MB) this "
        "many GRPO steps in a row",
    )
    poll_interval_s: float = Field(
        0.02, gt=0.0, le=1.0, description="the dispatcher's longest sleep between looks at finished calls"
    )
    name_prefix: str = Field(
        "reward-worker", pattern=NAME_PATTERN, description="actors are named '<name_prefix>-<i>'"
    )
    namespace: str | None = Field(None, pattern=NAME_PATTERN, description="Ray namespace of the named actors")
    autoscale: AutoscaleConfig | None = Field(
        None,
        description="grow and shrink the pool by the trainer's wait for rewards, num_workers being the "
        "starting size (none: num_workers throughout)",
    )

    @field_validator("resources")
    @classmethod
    def _custom_resources(cls, value: dict[str, float]) -> dict[str, float]:
        return check_custom_resources(value, "pool.cpus_per_worker")

    @field_validator("label_selector")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        return check_label_selector(value)

    @model_validator(mode="after")
    def _check(self) -> PoolConfig:
        if self.min_chunk_size > self.chunk_size:
            raise ValueError(
                f"min_chunk_size ({self.min_chunk_size}) must be <= chunk_size ({self.chunk_size})"
            )
        if self.item_timeout_s is not None and self.item_timeout_s >= self.chunk_timeout_s:
            raise ValueError(
                f"item_timeout_s ({self.item_timeout_s:g}) must be < chunk_timeout_s ({self.chunk_timeout_s:g}): "
                "an item is cut before its call is"
            )
        if self.autoscale is not None:
            low, high = self.autoscale.min_workers, self.autoscale.max_workers
            if not low <= self.num_workers <= high:
                raise ValueError(
                    f"num_workers ({self.num_workers}), the autoscaled pool's starting size, must be within "
                    f"autoscale.min_workers..max_workers ({low}..{high})"
                )
            if self.placement == "inline":
                raise ValueError(
                    "autoscale sizes the pool by the trainer's wait for it, and placement=inline scores in the "
                    "trainer's process, never on the pool: use placement=pool or auto"
                )
        hang_s = max_runs_per_item(self) * self.chunk_timeout_s
        if self.collect_timeout_s < hang_s:
            raise ValueError(
                f"collect_timeout_s ({self.collect_timeout_s:g}) must be >= {hang_s:g}: a hanging item runs "
                f"up to {max_runs_per_item(self)} times x chunk_timeout_s ({self.chunk_timeout_s:g}) "
                "before it gets status timeout"
            )
        return self


def worker_name(cfg: PoolConfig, index: int) -> str:
    """Actor name of worker `index`: '<name_prefix>-<index>'."""
    return f"{cfg.name_prefix}-{index}"


def item_timeout(cfg: PoolConfig) -> float:
    """Deadline of one item of a waiting (async or threaded) reward on a worker."""
    return cfg.item_timeout_s if cfg.item_timeout_s is not None else cfg.chunk_timeout_s / 2


def split_levels(chunk_len: int, parts: int) -> int:
    """Splits needed to cut a chunk of `chunk_len` items down to single items, `parts` pieces a time."""
    levels, size = 0, chunk_len
    while size > 1:
        size = math.ceil(size / parts)
        levels += 1
    return levels


def max_runs_per_item(cfg: PoolConfig, chunk_len: int | None = None) -> int:
    """Most calls one item can be part of when it keeps timing out.

    The chunk it came in times out once, then each smaller piece holding it once, until it is alone;
    alone it is re-run `max_retries` more times before it gets status `timeout`.
    """
    n = cfg.chunk_size if chunk_len is None else chunk_len
    return 1 + split_levels(n, cfg.split_parts) + cfg.max_retries


def poison_item_bound_s(cfg: PoolConfig, restart_s: float, chunk_len: int | None = None) -> float:
    """Upper bound on the time from dispatch until a hanging item gets status `timeout`.

    Each run of it costs the deadline plus, at worst, waiting `restart_s` for a killed worker to
    come back (`restart_s` is measured on the cluster; `restart_timeout_s` caps it). Work queued
    ahead of it on a busy pool adds to this.
    """
    return max_runs_per_item(cfg, chunk_len) * (cfg.chunk_timeout_s + restart_s)


def item_deadline_s(cfg: PoolConfig) -> float:
    """The longest one item of a plain reward may take: alone in a call, it is killed after this."""
    return cfg.chunk_timeout_s


# A call is sized to take at most this share of its deadline at the measured cost per item, so a
# slow but healthy reward (or an item slower than the ones measured) is never killed.
CALL_BUDGET_SHARE = 0.25


def chunks_for_cost(cfg: PoolConfig, cost_per_item_s: float) -> PoolConfig:
    """The pool config with chunk sizes cut to what the measured cost per item allows (never raised)."""
    if cost_per_item_s <= 0:
        return cfg
    fits = max(1, math.floor(CALL_BUDGET_SHARE * cfg.chunk_timeout_s / cost_per_item_s))
    size = min(cfg.chunk_size, fits)
    if size == cfg.chunk_size:
        return cfg
    return PoolConfig.model_validate(
        {**cfg.model_dump(), "chunk_size": size, "min_chunk_size": min(cfg.min_chunk_size, size)}
    )
