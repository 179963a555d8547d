"""The user rewards of one scorer, as it calls them: `UserRewards`.

    users = UserRewards.resolve(config.user, data_source="fen")
    value = users.call(users.rewards[0], completion, target, fields)

Each reward is resolved once from its spec (`rewards.user_reward.UserReward`) and called in its
style (`rewards.styles`): once per item with the arguments it names, once per batch with lists
(TRL), or with verl's `compute_score` arguments. A class reward is built once in the process that
scores (its `setup()` called then, its `close()` at the end). What TRL- and verl-style rewards log
besides their values is kept in `reward_log`. Pickled, the rewards keep their resolved functions;
the built objects and the log start afresh in the other process.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from rewards.config import UserRewardSpec
from rewards.reward_log import RewardLog
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
    user_args,
    with_parts,
)


class UserRewards:
    """A scorer's user rewards: resolved, called in their styles, their class objects and logs."""

    def __init__(self, rewards: Sequence[UserReward] = (), data_source: str = "text"):
        """data_source: what a verl-style reward is given as `data_source` when the item carries none
        (the task's name)."""
        self.rewards = tuple(rewards)
        self.data_source = data_source
        self._start()

    @classmethod
    def resolve(cls, specs: Sequence[UserRewardSpec], data_source: str = "text") -> UserRewards:
        """Each spec's function found now (RewardSpecError when one cannot be)."""
        return cls([UserReward.resolve(s) for s in specs], data_source)

    def _start(self) -> None:
        self._instances: dict[str, Any] = {}  # class rewards' objects, built in the process that scores
        self.reward_log = RewardLog()  # what TRL- and verl-style rewards logged in this process

    def __getstate__(self) -> dict[str, Any]:
        return {"rewards": self.rewards, "data_source": self.data_source}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.rewards, self.data_source = state["rewards"], state["data_source"]
        self._start()

    # ---- what they are -----------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        return [u.name for u in self.rewards]

    @property
    def params(self) -> dict[str, RewardParams]:
        """How each is called, by name: which arguments it takes (`rewards.signature`)."""
        return {u.name: u.params for u in self.rewards}

    @property
    def concurrent(self) -> bool:
        """True when one is `async def` or asks for threads (`rewards.concurrent`)."""
        return any(u.concurrent for u in self.rewards)

    @property
    def takes_token_ids(self) -> bool:
        """Whether one is called with each completion's token ids (TRL's `completion_ids`)."""
        return any(takes_token_ids(u.params) for u in self.rewards)

    @property
    def batched(self) -> list[UserReward]:
        """The TRL-style ones: called once per batch with lists."""
        return [u for u in self.rewards if u.batched]

    # ---- their lives in this process -----------------------------------------------------------

    def setup(self) -> None:
        """Build each class reward once in this process and call its `setup()`."""
        for user in self.rewards:
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

    # ---- one item ------------------------------------------------------------------------------

    def call(self, user: UserReward, completion: str, target: Any, fields: Fields) -> float:
        """One reward's checked value for one item (an `async def` one runs to completion here; a
        TRL-style one is called with lists of one item)."""
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
            return (), verl_kwargs(user.params, completion, target, fields, self.data_source)
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

    # ---- a batch, TRL's way --------------------------------------------------------------------

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
