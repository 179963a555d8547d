"""Checks of where Ray may place an actor: custom resources and node label selectors.

Used by the reward pool's config (`pool.resources`, `pool.label_selector`) and by the trainer
group's (`scaling.resources_per_worker`, `scaling.label_selector`), so a typo fails when the
config is read, not when Ray refuses the actor minutes into a run. Pure: no Ray import (configs
are validated before Ray starts).
"""

from __future__ import annotations

import math
import re

# Set by their own keys (cpus_per_worker, gpus_per_worker): a second way to ask would be ambiguous.
BUILT_IN_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
_RESOURCE_NAME = re.compile(r"^[A-Za-z0-9_.:/\-]{1,128}$")
# Kubernetes label syntax, which Ray's node labels follow: an optional DNS-subdomain prefix and '/'.
_LABEL_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.\-]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([a-z0-9.\-]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")
# Ray's selector values: 'v', '!v', 'in(a,b)', '!in(a,b)'.
_IN_LIST = re.compile(r"^!?in\((.*)\)$")


def check_custom_resources(resources: dict[str, float], cpus_key: str) -> dict[str, float]:
    """`resources` unchanged, or ValueError naming the bad entry."""
    for name, amount in resources.items():
        if name in BUILT_IN_RESOURCES:
            raise ValueError(
                f"{name!r} is a built-in resource; set it with {cpus_key} (or the GPU key), "
                "and use this map for custom resources such as {reward_node: 1}"
            )
        if not _RESOURCE_NAME.match(name):
            raise ValueError(f"{name!r} is not a resource name; expected letters, digits and _.:/-")
        if not (isinstance(amount, int | float) and math.isfinite(amount) and amount > 0):
            raise ValueError(f"{name}: {amount!r} is not allowed; a resource amount must be a number > 0")
    return resources


def check_label_selector(selector: dict[str, str]) -> dict[str, str]:
    """`selector` unchanged, or ValueError naming the bad key or value."""
    for key, value in selector.items():
        if not _LABEL_KEY.match(key):
            raise ValueError(
                f"{key!r} is not a node label key; expected [prefix/]name, e.g. ray.io/node-group"
            )
        values = _selector_values(value)
        if not values or any(not v or not _LABEL_VALUE.match(v) for v in values):
            raise ValueError(
                f"{key}: {value!r} is not a label selector value; expected 'v', '!v', 'in(a,b)' or '!in(a,b)'"
            )
    return selector


def _selector_values(value: str) -> list[str]:
    listed = _IN_LIST.match(value)
    if listed:
        return [v.strip() for v in listed.group(1).split(",")]
    return [value.removeprefix("!")]


def describe_placement(resources: dict[str, float], selector: dict[str, str]) -> str:
    """' with resources {...} on nodes labelled {...}', or '' when neither is set (for messages)."""
    out = ""
    if resources:
        out += f" with resources {resources}"
    if selector:
        out += f" on nodes labelled {selector}"
    return out
