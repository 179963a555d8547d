"""Configuration of the rewards: what every task's scorer shares (the length cap, the user rewards),
and the keys of the built-in rewards (the fen reward's weights, the move reward's engine)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Names of the built-in components; a user reward may not take one of them.
BUILTIN_COMPONENTS: tuple[str, ...] = ("validity", "similarity", "exact")

# "package.module:function" (the attribute may be dotted: "pkg.mod:Class.method").
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
IMPORT_SPEC = re.compile(rf"^{_DOTTED}:{_DOTTED}$")
# A bare identifier names a function given to `rewards.register_reward` in this process.
REGISTERED_NAME = re.compile(r"^[A-Za-z_]\w*$")

SPEC_HELP = (
    "expected 'package.module:function' (importable in every reward worker) "
    "or a bare name given to rewards.register_reward(name, fn)"
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class UserRewardSpec(_Frozen):
    """One user reward: `fn(completion, target) -> float`, added to the total times `weight`
    (or a function written for TRL or verl, called as they call it: `style`).

    `fn` may be `async def` (its items are awaited side by side), or a class: built once per
    reward worker, its `setup()` called then, its `__call__` scoring, its `close()` called at the end.
    """

    fn: str = Field(description="'package.module:function', or a name given to register_reward")
    weight: float = Field(1.0, description="the reward's weight in the total")
    threads: bool = Field(
        False,
        description="a plain reward that blocks on I/O: its items run on pool.concurrency_per_worker threads",
    )
    style: Literal["auto", "item", "trl", "verl"] = Field(
        "auto",
        description=(
            "how fn is called: item (once per item: fn(completion, target), or by name), trl (once per "
            "chunk with lists, as TRL's GRPOTrainer calls it), verl (compute_score(data_source, solution_str, "
            "ground_truth, extra_info)); auto reads it from the signature (rewards/styles.py)"
        ),
    )

    @field_validator("fn")
    @classmethod
    def _check_fn(cls, value: str) -> str:
        if not (IMPORT_SPEC.match(value) or REGISTERED_NAME.match(value)):
            raise ValueError(f"user reward fn {value!r}: {SPEC_HELP}")
        if value in BUILTIN_COMPONENTS:
            raise ValueError(
                f"user reward fn {value!r} clashes with a built-in component {BUILTIN_COMPONENTS}"
            )
        return value


class RewardConfig(_Frozen):
    """What every task's scorer reads: the length cap and the user rewards (a task's own weights
    are in its section of the config: `FenRewardConfig` for the fen task)."""

    max_chars: int = Field(512, ge=1, description="longer completions (after strip) score 0 as too_long")
    user: list[UserRewardSpec] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _fen_keys_elsewhere(cls, data: Any) -> Any:
        if isinstance(data, dict):
            fen = next((k for k in data if k in FenRewardConfig.model_fields), None)
            if fen is not None:
                raise ValueError(
                    f"{fen} is a key of the fen reward (rewards.FenRewardConfig; task.{fen} in a run's config)"
                )
        return data

    @model_validator(mode="after")
    def _check_unique_user(self) -> RewardConfig:
        seen: set[str] = set()
        for spec in self.user:
            if spec.fn in seen:
                raise ValueError(f"user reward {spec.fn!r} is listed twice")
            seen.add(spec.fn)
        return self


class FenRewardConfig(_Frozen):
    """The fen reward's keys: the weights of its components (default weights sum to 1, so totals lie
    in [0, 1]) and the memo of its validity tier."""

    validity_weight: float = Field(
        0.25, description="weight of FEN validity (parses < parses but invalid < valid)"
    )
    similarity_weight: float = Field(0.5, description="weight of the Levenshtein similarity to the target")
    exact_weight: float = Field(0.25, description="weight of an exact match of the target")
    cache_size: int = Field(65536, ge=0, description="validity memo entries in score_batch; 0 disables it")


class EngineConfig(_Frozen):
    """The UCI engine that judges moves (the `move` task): one process per scorer, single-threaded,
    a fixed node budget per search, hash cleared before each search, so its judgements repeat exactly."""

    path: str | None = Field(
        None, description="engine binary (default: 'stockfish' on PATH, then /usr/games/stockfish)"
    )
    nodes: int = Field(2000, ge=1, le=10_000_000, description="node budget of one search")
    hash_mb: int = Field(1, ge=1, le=4096, description="engine hash table (MB); cleared before every search")
    cp_scale: float = Field(
        100.0, gt=0.0, description="centipawn loss at which a legal move's quality falls to 0.5"
    )
    max_cp_loss: float = Field(
        1000.0, gt=0.0, description="larger losses (mates, blunders) count as this many centipawns"
    )
    start_timeout_s: float = Field(30.0, gt=0.0, description="longest the engine may take to start")
