"""Dotted config keys looked up in a tree of pydantic models, and one-line messages for what is wrong.

Generic over the root model (the service passes `ServiceConfig`), so that the schema module holds
sections alone and these rules are written once.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

_SHOULD = re.compile(r"^(Input|String|Value|List|Dictionary) should")


class ConfigError(ValueError):
    """A config that cannot be used; str() is one line naming the key, the value and what is allowed."""


def quoted(values: Any) -> str:
    return ", ".join(repr(v) for v in values)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (`X`, `X | None`), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _is_map(field: Any) -> bool:
    return field is not None and typing.get_origin(field.annotation) is dict


def field_at(root: type[BaseModel], key: str) -> Any:
    """The FieldInfo that a dotted key names under `root` (ConfigError for an unknown key)."""
    model: type[BaseModel] | None = root
    parts = key.split(".")
    field = None
    for depth, part in enumerate(parts):
        if model is None and depth == len(parts) - 1 and _is_map(field):
            return field  # one entry of a map key, e.g. pool.resources.reward_node
        if model is None:
            raise ConfigError(f"{key}: {'.'.join(parts[:depth])} is a value, not a section")
        if part not in model.model_fields:
            section = ".".join(parts[:depth]) or "the top level"
            raise ConfigError(
                f"{key}: unknown key {part!r}; allowed keys of {section}: {', '.join(model.model_fields)}"
            )
        field = model.model_fields[part]
        model = _model_in(field.annotation)
    return field


def wants_string(root: type[BaseModel], key: str) -> bool:
    """Whether the key's field takes text (so `run.name=2024` stays the string '2024')."""
    annotation = field_at(root, key).annotation
    args = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else ()
    )
    return annotation is str or str in args


def _allowed_keys(root: type[BaseModel], loc: Sequence[Any]) -> str:
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int):  # an item of a list section: same model
            continue
        if model is None or part not in model.model_fields:
            return ""
        model = _model_in(model.model_fields[part].annotation)
    return ", ".join(model.model_fields) if model is not None else ""


def describe_error(root: type[BaseModel], error: Mapping[str, Any]) -> str:
    """One line for one pydantic error: 'dotted.key: value is not allowed; what is allowed'."""
    loc = [p for p in error["loc"] if p != "function-after"]
    key = ".".join(str(p) for p in loc) or "config"
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        section = ".".join(str(p) for p in loc[:-1]) or "the top level"
        return f"{key}: unknown key {loc[-1]!r}; allowed keys of {section}: {_allowed_keys(root, loc[:-1])}"
    if kind == "value_error":  # a model validator: the message names the fields itself
        message = str(ctx.get("error", error["msg"]))
        return f"{key}: {message}" if loc else message
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{key}: {error['input']!r} is not allowed; expected a section (a mapping of keys)"
    if kind == "missing":
        return f"{key}: missing; this section needs it"
    if kind == "literal_error":
        allowed = str(ctx.get("expected", "")).replace(" or ", ", ")
        return f"{key}: {error['input']!r} is not allowed; expected one of {allowed}"
    return f"{key}: {error['input']!r} is not allowed; {_SHOULD.sub('must', error['msg'])}"
