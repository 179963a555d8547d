"""A user reward as the scorer holds it: resolved once from its spec, called by name or position,
and what it returns checked (a finite number, or None to skip the item)."""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from rewards.config import UserRewardSpec
from rewards.registry import RewardFn, resolve_reward
from rewards.signature import RewardParams, reward_args
from rewards.styles import TRL, read_style

Fields = Mapping[str, Any] | None  # an item's data fields, for user rewards that take them by name


class UserReward(NamedTuple):
    name: str  # component name: the spec string as configured
    weight: float
    fn: RewardFn  # a function, or a class (instantiated once per scorer process; see `Scorer.setup`)
    params: RewardParams  # how it is called (read once from its signature)
    is_async: bool = False  # `async def` (a function, or a class's __call__): awaited
    threads: bool = False  # a plain reward that blocks on I/O: run on a thread when scored concurrently

    @staticmethod
    def resolve(spec: UserRewardSpec) -> UserReward:
        fn = resolve_reward(spec.fn)
        call = fn.__call__ if inspect.isclass(fn) else fn
        # an object whose __call__ is `async def` (TRL's callable-class rewards) is awaited too
        is_async = inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(type(call).__call__)
        params = read_style(fn, spec.style, spec.fn)
        return UserReward(spec.fn, spec.weight, fn, params, is_async, spec.threads)

    @property
    def batched(self) -> bool:
        """Called once per batch with lists (TRL's style; `rewards.styles`), not once per item."""
        return self.params.style == TRL

    @property
    def concurrent(self) -> bool:
        """Whether its items are worth running side by side (it waits rather than computes)."""
        return self.is_async or self.threads


class UserRewardError(Exception):
    """A user reward raised or returned something other than a finite number."""


class RewardSkipped(UserRewardError):
    """A user reward returned None: it declines to score the item (status `skipped`)."""


def user_args(user: UserReward, completion: str, target: Any, fields: Fields) -> tuple[tuple, dict[str, Any]]:
    try:
        return reward_args(user.params, completion, target, fields)
    except KeyError as exc:
        raise UserRewardError(
            f"user reward {user.name!r} needs {exc.args[0]!r}, which this item lacks"
        ) from None


class ValueWithParts(float):
    """A user reward's value with the other numbers its result carried (the keys of a verl-style
    dict besides `score`): the scorer keeps them as components `<fn>/<key>`."""

    parts: dict[str, float]


def with_parts(value: float, parts: Mapping[str, float]) -> float:
    """`value`, carrying the finite numbers of `parts` when there are any."""
    finite = {k: v for k, v in parts.items() if math.isfinite(v)}
    if not finite:
        return value
    out = ValueWithParts(value)
    out.parts = finite
    return out


def part_components(name: str, value: float) -> dict[str, float]:
    """The components of one user reward's value: `name`, and `name/key` for each part it carried."""
    parts = getattr(value, "parts", None) or {}
    return {name: float(value), **{f"{name}/{key}": part for key, part in parts.items()}}


def is_reported(component: str, names: Collection[str]) -> bool:
    """Whether a result's component is one of the scorer's named ones (`names`) or a part one of
    them carried (`<name>/<key>`); a step reports the means of those."""
    return component in names or component.rsplit("/", 1)[0] in names


def checked_value(user: UserReward, value: Any) -> float:
    """`value` as a float; RewardSkipped for None; UserRewardError when it is not a finite number."""
    if value is None:
        raise RewardSkipped(f"user reward {user.name!r} returned None: the item is skipped")
    if not isinstance(value, numbers.Real):
        raise UserRewardError(
            f"user reward {user.name!r} returned {type(value).__name__} {value!r:.80}, not a number"
        )
    value = float(value)
    if not math.isfinite(value):
        raise UserRewardError(f"user reward {user.name!r} returned non-finite {value}")
    return value
