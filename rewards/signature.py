"""Which arguments a user reward takes, read once from its signature when it is resolved.

Two conventions:
- positional: `fn(completion, target)`, whatever the parameters are called. Every reward whose
  signature has no parameter named `completion` follows it, and so does any callable whose
  signature cannot be read (a C function such as `Levenshtein:ratio`).
- by name, when a parameter is called `completion`: the reward gets `completion` and each other
  parameter it names: `target` (the item's target), `prompt` (the prompt text of the item), or
  any field of the item's data row (TRL hands dataset columns to reward functions the same way).
  `**kwargs` takes every field the item carries. A parameter with a default may be absent from
  the data; one without must be present in every row (the task checks this before a run).

    def reward(completion, a, b): ...            # row fields a and b, by name
    def reward(completion, target, **row): ...   # the target and every field
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from rewards.registry import RewardSpecError

COMPLETION, TARGET = "completion", "target"


class RewardParams(NamedTuple):
    """What a user reward is called with."""

    by_name: bool  # False: fn(completion, target), positionally
    takes_target: bool  # by name: it has a `target` parameter
    fields: tuple[str, ...]  # by name: the other parameters (prompt, row fields)
    required: tuple[str, ...]  # the fields and target among them without a default
    any_field: bool  # by name: it takes **kwargs, so every field the item carries
    style: str = "item"  # item (the two conventions above), trl or verl (`rewards.styles`)
    given: tuple[str, ...] = ()  # trl/verl: the arguments of that convention the function accepts


POSITIONAL = RewardParams(by_name=False, takes_target=True, fields=(), required=(TARGET,), any_field=False)


class RewardSignatureError(RewardSpecError):
    """A reward whose signature cannot be served by name (e.g. a positional-only parameter)."""


def reward_params(fn: Callable[..., Any], name: str = "") -> RewardParams:
    """How `fn` is called, from its signature (read once, when the reward is resolved)."""
    try:
        signature = inspect.signature(fn.__call__ if inspect.isclass(fn) else fn)
    except (TypeError, ValueError):  # builtins and some C callables: the positional convention
        return POSITIONAL
    if inspect.isclass(fn):  # a class reward: its objects are called, so `self` is not an argument
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    params = signature.parameters
    if COMPLETION not in params:
        return POSITIONAL
    named, required, any_field = [], [], False
    for param in params.values():
        if param.kind is param.VAR_KEYWORD:
            any_field = True
        elif param.kind is param.VAR_POSITIONAL:
            continue
        elif param.kind is param.POSITIONAL_ONLY:
            raise RewardSignatureError(
                f"user reward {name or fn!r}: parameter {param.name!r} is positional-only; a reward that "
                f"takes 'completion' by name gets every argument by name"
            )
        elif param.name != COMPLETION:
            named.append(param.name)
            if param.default is param.empty:
                required.append(param.name)
    return RewardParams(
        by_name=True,
        takes_target=TARGET in named,
        fields=tuple(n for n in named if n != TARGET),
        required=tuple(required),
        any_field=any_field,
    )


def reward_args(
    params: RewardParams, completion: str, target: Any, fields: Mapping[str, Any] | None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(args, kwargs) of one call; KeyError naming a required argument the item lacks."""
    if not params.by_name:
        return (completion, target), {}
    kwargs: dict[str, Any] = {}
    row = fields or {}
    if params.any_field:
        kwargs.update(row)
    else:
        for field in params.fields:
            if field in row:
                kwargs[field] = row[field]
    if target is not None and (params.takes_target or params.any_field):
        kwargs[TARGET] = target
    kwargs[COMPLETION] = completion
    missing = [r for r in params.required if r not in kwargs]
    if missing:
        raise KeyError(missing[0])
    return (), kwargs
