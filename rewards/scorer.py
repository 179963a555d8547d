"""The composite scorer: validity + similarity + exact match + user rewards, weighted.

`Scorer.score` is the reference, written straight from the formula. `Scorer.score_batch` is the
fast path and returns exactly what `score` returns item by item: it memoises the validity tier
of repeated completions (an exact hit shares its entry with the target, so the target is parsed
once per batch, not once per completion) in a bounded LRU that lives as long as the scorer.
Both cap the length before any parse or quadratic work, and neither ever raises on bad data.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rewards.config import BUILTIN_COMPONENTS, RewardConfig
from rewards.fen import fen_validity, similarity
from rewards.result import BAD_INPUT, ERROR, OK, SKIPPED, TOO_LONG, ScoreResult
from rewards.reward_log import EXTRA_KEY, LOG_EXTRA, RewardLog, place_extras
from rewards.signature import RewardParams
from rewards.styles import (
    VERL,
    takes_token_ids,
    trl_kwargs,
    trl_list,
    verl_kwargs,
    verl_value,
    without_token_ids,
)
from rewards.user_reward import (
    Fields,
    RewardSkipped,
    UserReward,
    UserRewardError,
    checked_value,
    part_components,
    user_args,
    with_parts,
)

ValidityFn = Callable[[str], tuple[float, str]]


class Scorer:
    """Scores completions against target FENs with one `RewardConfig`."""

    task_name = "fen"  # a verl-style reward's data_source when the item carries none

    def __init__(self, config: RewardConfig | None = None):
        if config is not None and not isinstance(config, RewardConfig):
            raise TypeError(
                f"config must be a RewardConfig (build_scorer takes a mapping), got {type(config).__name__}"
            )
        self.config = config if config is not None else RewardConfig()
        self._user = tuple(UserReward.resolve(s) for s in self.config.user)
        self._init_cache()

    @classmethod
    def _with_resolved(cls, config: RewardConfig, user: tuple[UserReward, ...]) -> Scorer:
        """Rebuild after unpickling, keeping the functions resolved where the scorer was built."""
        scorer = cls.__new__(cls)
        scorer.config, scorer._user = config, user
        scorer._init_cache()
        return scorer

    def __reduce__(self) -> tuple[Any, ...]:
        # The LRU wrapper cannot be pickled; the cache is rebuilt empty on the other side.
        return (type(self)._with_resolved, (self.config, self._user))

    def _init_cache(self) -> None:
        self._instances: dict[str, Any] = {}  # class rewards' objects, built in the process that scores
        self.reward_log = RewardLog()  # what TRL- and verl-style rewards logged in this process
        size = self.config.cache_size
        self._cached_validity: ValidityFn = (
            functools.lru_cache(maxsize=size)(fen_validity) if size else fen_validity
        )

    def setup(self) -> None:
        """Build each class reward once in this process and call its `setup()` (a reward worker calls
        this when it starts; otherwise it happens at the first score)."""
        for user in self._user:
            self.reward_callable(user)

    def close(self) -> None:
        """Call `close()` of each class reward built here and forget them."""
        instances, self._instances = self._instances, {}
        for obj in instances.values():
            close = getattr(obj, "close", None)
            if callable(close):
                close()

    def reward_callable(self, user: UserReward) -> Callable[..., Any]:
        """What is called for `user`: its function, or its class's object in this process."""
        if not inspect.isclass(user.fn):
            return user.fn
        obj = self._instances.get(user.name)
        if obj is None:
            obj = user.fn()
            setup = getattr(obj, "setup", None)
            if callable(setup):
                setup()
            self._instances[user.name] = obj
        return obj

    def call_user(self, user: UserReward, completion: str, target: Any, fields: Fields) -> float:
        """One user reward's checked value for one item (an `async def` one runs to completion here;
        a TRL-style one is called with lists of one item)."""
        if user.batched:
            value = self.trl_values(user, [completion], [target], [fields])[0][0]
            if isinstance(value, UserRewardError):
                raise value
            return value
        fn = self.reward_callable(user)
        args, kwargs = self.item_args(user, completion, target, fields)
        try:
            value = fn(*args, **kwargs)
            if user.is_async:
                value = asyncio.run(value)
        except Exception as exc:
            raise UserRewardError(f"user reward {user.name!r} raised {type(exc).__name__}: {exc}") from exc
        return self.item_value(user, value)

    def item_args(
        self, user: UserReward, completion: str, target: Any, fields: Fields
    ) -> tuple[tuple, dict[str, Any]]:
        """(args, kwargs) of a per-item reward's call (item or verl style)."""
        fields = without_token_ids(fields)
        if user.params.style != VERL:
            return user_args(user, completion, target, fields)
        try:
            return (), verl_kwargs(user.params, completion, target, fields, self.task_name)
        except KeyError as exc:
            raise UserRewardError(
                f"user reward {user.name!r} needs {exc.args[0]!r}, which this item lacks"
            ) from None

    def item_value(self, user: UserReward, raw: Any) -> float:
        """A per-item reward's result checked (a verl-style dict gives its `score`)."""
        if user.params.style == VERL:
            try:
                raw, extras = verl_value(raw)
            except ValueError as exc:
                raise UserRewardError(f"user reward {user.name!r} {exc}") from None
            for key, value in extras.items():
                self.reward_log.record(f"{user.name}/{key}", value)
            return with_parts(checked_value(user, raw), extras)
        return checked_value(user, raw)

    def rewarded(self, completions: list[Any], targets: list[Any]) -> list[int]:
        """Indices of the items the user rewards see (the others end bad_input or too_long first)."""
        return [
            i
            for i, (c, t) in enumerate(zip(completions, targets, strict=True))
            if isinstance(c, str) and self._target_ok(t) and len(self._clean(c)) <= self.config.max_chars
        ]

    def trl_call(
        self, user: UserReward, completions: list[str], targets: list[Any], rows: list[Fields]
    ) -> tuple[Callable[..., Any], dict[str, Any], dict[str, list[Any]]]:
        """The callable and keyword arguments of one TRL-style call (UserRewardError: a column
        lacks), and where the call's `log_extra` columns will be."""
        extras: dict[str, list[Any]] = {}
        try:
            kwargs = trl_kwargs(user.params, completions, targets, rows, self.reward_log, user.name, extras)
        except KeyError as exc:
            raise UserRewardError(
                f"user reward {user.name!r} needs {exc.args[0]!r}, which an item of this call lacks"
            ) from None
        return self.reward_callable(user), kwargs, extras

    def trl_checked(self, user: UserReward, raw: Any, n: int) -> list[float | UserRewardError]:
        """Per item: the float, RewardSkipped for None; every item's UserRewardError for a bad list."""
        try:
            values = trl_list(raw, n)
        except ValueError as exc:
            return [UserRewardError(f"user reward {user.name!r} {exc}") for _ in range(n)]
        return [
            RewardSkipped(f"user reward {user.name!r} returned None for this item: it is skipped")
            if v is None
            else v
            for v in values
        ]

    def trl_values(
        self, user: UserReward, completions: list[str], targets: list[Any], rows: list[Fields]
    ) -> tuple[list[float | UserRewardError], dict[str, list[Any]]]:
        """One TRL-style call over these (cleaned) items: each item's value or its UserRewardError,
        and the call's `log_extra` columns."""
        n, extras = len(completions), {}
        try:
            fn, kwargs, extras = self.trl_call(user, completions, targets, rows)
            raw = fn(**kwargs)
            if user.is_async:
                raw = asyncio.run(raw)
        except UserRewardError as exc:
            return [UserRewardError(str(exc)) for _ in range(n)], extras
        except Exception as exc:
            why = f"user reward {user.name!r} raised {type(exc).__name__}: {exc}"
            return [UserRewardError(why) for _ in range(n)], extras
        return self.trl_checked(user, raw, n), extras

    def batch_done(
        self, completions: list[Any], targets: list[Any], rows: list[Fields]
    ) -> list[dict[str, Any]]:
        """The values of the TRL-style rewards, one call each over the batch, as `done` per item."""
        done: list[dict[str, Any]] = [{} for _ in completions]
        batched = [u for u in self._user if u.batched]
        index = self.rewarded(completions, targets) if batched else []
        if not index:
            return done
        cleaned = [self._clean(completions[i]) for i in index]
        for user in batched:
            values, extras = self.trl_values(
                user, cleaned, [targets[i] for i in index], [rows[i] for i in index]
            )
            for i, value in zip(index, values, strict=True):
                done[i][user.name] = value
            place_extras(done, index, extras)
        return done

    @property
    def concurrent(self) -> bool:
        """True when a user reward is `async def` or asks for threads (`rewards.concurrent`)."""
        return any(u.concurrent for u in self._user)

    @property
    def user_rewards(self) -> tuple[UserReward, ...]:
        return self._user

    @property
    def component_names(self) -> list[str]:
        """Names of the components of an `ok` / `invalid` / `unparsable` / `too_long` result."""
        return [*BUILTIN_COMPONENTS, *(u.name for u in self._user)]

    @property
    def user_params(self) -> dict[str, RewardParams]:
        """How each user reward is called, by name: which arguments it takes (`rewards.signature`)."""
        return {u.name: u.params for u in self._user}

    @property
    def takes_token_ids(self) -> bool:
        """Whether a user reward is called with each completion's token ids (TRL's `completion_ids`):
        the trainer then sends them with every item."""
        return any(takes_token_ids(u.params) for u in self._user)

    def cache_info(self) -> dict[str, int]:
        """Hits, misses and current size of the validity memo (all 0 when it is disabled)."""
        info = getattr(self._cached_validity, "cache_info", None)
        if info is None:
            return {"hits": 0, "misses": 0, "size": 0}
        ci = info()
        return {"hits": ci.hits, "misses": ci.misses, "size": ci.currsize}

    def score(
        self, completion: Any, target: Any, fields: Fields = None, done: Mapping[str, Any] | None = None
    ) -> ScoreResult:
        """Score one completion (the reference path: no memo). `fields`: the item's data fields,
        for user rewards that take them by name (`rewards.signature`). `done`: user reward values
        (or their UserRewardError) already computed elsewhere, by name (`rewards.concurrent`)."""
        return self._score_one(completion, target, fields, fen_validity, done)

    def score_batch(
        self, completions: Iterable[Any], targets: Iterable[Any], fields: Iterable[Fields] | None = None
    ) -> list[ScoreResult]:
        """Score item i of `completions` against item i of `targets` (and of `fields` when given);
        same results as `score`."""
        completions, targets = _as_list(completions, "completions"), _as_list(targets, "targets")
        if len(completions) != len(targets):
            raise ValueError(
                f"score_batch needs one target per completion: got {len(completions)} completions "
                f"and {len(targets)} targets"
            )
        rows = [None] * len(completions) if fields is None else _as_list(fields, "fields")
        if len(rows) != len(completions):
            raise ValueError(f"score_batch got {len(rows)} field rows for {len(completions)} completions")
        validity = self._cached_validity
        done = self.batch_done(completions, targets, rows)
        return [
            self._score_one(c, t, f, validity, d)
            for c, t, f, d in zip(completions, targets, rows, done, strict=True)
        ]

    def _score_one(
        self,
        completion: Any,
        target: Any,
        fields: Fields,
        validity_fn: ValidityFn,
        done: Mapping[str, Any] | None = None,
    ) -> ScoreResult:
        if not isinstance(completion, str) or not self._target_ok(target):
            which = "completion" if not isinstance(completion, str) else "target"
            bad = completion if which == "completion" else target
            return ScoreResult.failed(BAD_INPUT, f"{which} must be a str, got {type(bad).__name__}")
        try:
            return self._score_str(self._clean(completion), target, fields, validity_fn, done or {})
        except RewardSkipped as exc:  # the reward declines to judge this item: no reward, never a 0
            return ScoreResult.failed(SKIPPED, str(exc))
        except UserRewardError as exc:
            return ScoreResult.failed(ERROR, str(exc))
        except Exception as exc:  # a scorer bug must surface as a counted error, never a crash or a 0
            return ScoreResult.failed(ERROR, f"scoring failed: {type(exc).__name__}: {exc}")

    def _target_ok(self, target: Any) -> bool:
        return isinstance(target, str)

    def _clean(self, completion: str) -> str:
        """The completion as the components see it: stripped (code keeps its indentation)."""
        return completion.strip()

    def _score_str(
        self, c: str, target: Any, fields: Fields, validity_fn: ValidityFn, done: Mapping[str, Any]
    ) -> ScoreResult:
        cfg = self.config
        if len(c) > cfg.max_chars:
            zeros = dict.fromkeys(self.component_names, 0.0)
            return ScoreResult(0.0, zeros, TOO_LONG, f"{len(c)} chars > max_chars={cfg.max_chars}")
        components, total, status = self._builtin(c, target, fields, validity_fn)
        for user in self._user:
            value = done[user.name] if user.name in done else self.call_user(user, c, target, fields)
            if isinstance(value, UserRewardError):
                raise value
            components.update(part_components(user.name, value))
            total += user.weight * value
        extra = done.get(EXTRA_KEY)  # what TRL-style rewards logged for this item with log_extra
        return ScoreResult(total, components, status, info={LOG_EXTRA: extra} if extra else None)

    def _builtin(
        self, c: str, target: str, fields: Fields, validity_fn: ValidityFn
    ) -> tuple[dict[str, float], float, str]:
        """The chess components, their weighted sum and the validity status."""
        cfg = self.config
        validity, status = validity_fn(c)
        sim = similarity(c, target)
        exact = 1.0 if c == target else 0.0
        components = {"validity": validity, "similarity": sim, "exact": exact}
        total = cfg.validity_weight * validity + cfg.similarity_weight * sim + cfg.exact_weight * exact
        return components, total, status


class UserRewardScorer(Scorer):
    """The user rewards alone, for a task that no chess component applies to (the `text` task).

    Same statuses, error handling and weights as `Scorer`: `ok` when every user reward gave a
    finite number, else `too_long`, `bad_input` or `error`. An item's target may be None (a row
    without one). Needs at least one user reward.
    """

    def __init__(self, config: RewardConfig | None = None):
        super().__init__(config)
        if not self._user:
            raise ValueError("reward.user: a task scored by user rewards alone needs at least one")

    @property
    def component_names(self) -> list[str]:
        return [u.name for u in self._user]

    task_name = "text"

    def _target_ok(self, target: Any) -> bool:
        return target is None or isinstance(target, str)

    def _builtin(
        self, c: str, target: Any, fields: Fields, validity_fn: ValidityFn
    ) -> tuple[dict[str, float], float, str]:
        return {}, 0.0, OK


def _as_list(items: Iterable[Any], name: str) -> list[Any]:
    if isinstance(items, str | bytes):
        raise TypeError(f"{name} must be a sequence of str, got a single {type(items).__name__}")
    return items if isinstance(items, list) else list(items)


def build_scorer(config: RewardConfig | Mapping[str, Any] | None = None) -> Scorer:
    """A `Scorer` from a config, a plain mapping of config fields, or None (defaults)."""
    if config is not None and not isinstance(config, RewardConfig):
        config = RewardConfig.model_validate(config)
    return Scorer(config)


@functools.cache
def default_scorer() -> Scorer:
    """The process-wide scorer with the default config (built on first use, not at import)."""
    return Scorer()


def score(completion: Any, target: Any) -> ScoreResult:
    """Score one completion with the default config."""
    return default_scorer().score(completion, target)


def score_batch(completions: Iterable[Any], targets: Iterable[Any]) -> list[ScoreResult]:
    """Score a batch with the default config (memoised fast path)."""
    return default_scorer().score_batch(completions, targets)
