"""User rewards: resolve "package.module:function" specs or functions registered in-process.

A user reward returns a float for the stripped, length-capped completion: called as
`fn(completion, target)`, or, when it has a parameter named `completion`, with the arguments it
names (the target, the prompt, fields of the item's data row; see `rewards.signature`). Specs are resolved when a `Scorer` is built, so a typo fails at start-up rather than
at the first score. Functions given to `register_reward` live only in the registering process;
reward workers in other processes need an importable "package.module:function" spec (or a
pickled `Scorer`, which carries its resolved functions with it).
"""

from __future__ import annotations

from collections.abc import Callable

from rewards.config import BUILTIN_COMPONENTS, IMPORT_SPEC, REGISTERED_NAME, SPEC_HELP
from rewards.importing import import_attribute

RewardFn = Callable[[str, str], float]

_registered: dict[str, RewardFn] = {}


class RewardSpecError(ValueError):
    """A user reward spec that cannot be resolved to a callable."""


def register_reward(name: str, fn: RewardFn, *, replace: bool = False) -> None:
    """Make `fn` available to `UserRewardSpec(fn=name)` in this process."""
    if not isinstance(name, str) or not REGISTERED_NAME.match(name):
        raise RewardSpecError(f"reward name {name!r} must be a bare identifier (letters, digits, _)")
    if name in BUILTIN_COMPONENTS:
        raise RewardSpecError(f"reward name {name!r} clashes with a built-in component {BUILTIN_COMPONENTS}")
    if not callable(fn):
        raise RewardSpecError(f"reward {name!r}: {fn!r} is not callable")
    if name in _registered and not replace and _registered[name] is not fn:
        raise RewardSpecError(f"reward {name!r} is already registered (pass replace=True to overwrite)")
    _registered[name] = fn


def unregister_reward(name: str) -> None:
    """Forget a registered reward; unknown names are ignored."""
    _registered.pop(name, None)


def registered_rewards() -> list[str]:
    """Names registered in this process, sorted."""
    return sorted(_registered)


def resolve_reward(spec: str) -> RewardFn:
    """The callable a spec names; RewardSpecError saying what is wrong otherwise."""
    if not isinstance(spec, str):
        raise RewardSpecError(f"user reward spec must be a str, got {type(spec).__name__}: {SPEC_HELP}")
    if REGISTERED_NAME.match(spec):
        if spec not in _registered:
            known = ", ".join(registered_rewards()) or "none"
            raise RewardSpecError(
                f"user reward {spec!r} is not registered in this process (registered: {known})"
            )
        return _registered[spec]
    if not IMPORT_SPEC.match(spec):
        raise RewardSpecError(f"user reward {spec!r}: {SPEC_HELP}")
    return _import_callable(spec)


def _import_callable(spec: str) -> RewardFn:
    obj = import_attribute(spec, f"user reward {spec!r}", RewardSpecError)
    if not callable(obj):
        attr_path = spec.split(":")[1]
        raise RewardSpecError(f"user reward {spec!r}: {attr_path!r} is a {type(obj).__name__}, not callable")
    return obj
