"""Dotted config keys looked up in a tree of pydantic models, and one-line messages for what is wrong.

Generic over the root model (the service passes `ServiceConfig`), so that the schema module holds
sections alone and these rules are written once.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

_SHOULD = re.compile(r"^(Input|String|Value|List|Dictionary) should")


class ConfigError(ValueError):
    """A config that cannot be used; str() is one line naming the key, the value and what is allowed."""


def quoted(values: Any) -> str:
    return ", ".join(repr(v) for v in values)


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The config models inside an annotation (`X`, `X | None`, `A | B`, `list[X]`, `dict[str, X]`)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if origin in (typing.Union, types.UnionType, list, dict, tuple):
        return [m for arg in typing.get_args(annotation) for m in _models(arg)]
    return []


def variants(field: Any) -> dict[Any, type[BaseModel]]:
    """The config models of a field, by tag: {tag: model, ...} for a tagged union (`model` by
    `source`, `task` by `name`: pydantic's discriminator), {None: model} for a plain section,
    {} for a value."""
    models = _models(field.annotation)
    key = field.discriminator
    if isinstance(key, str) and len(models) > 1:
        return {typing.get_args(m.model_fields[key].annotation)[0]: m for m in models}
    return {None: models[0]} if models else {}


def tag_key(models: Mapping[Any, type[BaseModel]]) -> str | None:
    """The key that tells the variants of a tagged union apart (each variant fixes it to its tag)."""
    if not models or None in models:
        return None
    first = next(iter(models.values()))
    for name in first.model_fields:
        if all(
            name in m.model_fields and typing.get_args(m.model_fields[name].annotation) == (tag,)
            for tag, m in models.items()
        ):
            return name
    return None


def section_fields(models: Mapping[Any, type[BaseModel]]) -> dict[str, Any]:
    """The keys of a section, each variant's in turn (a key two variants share is listed once)."""
    fields: dict[str, Any] = {}
    for model in models.values():
        for name, field in model.model_fields.items():
            fields.setdefault(name, field)
    return fields


def _is_map(field: Any) -> bool:
    return field is not None and typing.get_origin(field.annotation) is dict


def field_at(root: type[BaseModel], key: str) -> Any:
    """The FieldInfo that a dotted key names under `root` (ConfigError for an unknown key); a key
    of a tagged union's variant is found in whichever variant has it."""
    models: dict[Any, type[BaseModel]] = {None: root}
    parts = key.split(".")
    field = None
    for depth, part in enumerate(parts):
        if not models and depth == len(parts) - 1 and _is_map(field):
            return field  # one entry of a map key, e.g. pool.resources.reward_node
        if not models:
            raise ConfigError(f"{key}: {'.'.join(parts[:depth])} is a value, not a section")
        fields = section_fields(models)
        if part not in fields:
            section = ".".join(parts[:depth]) or "the top level"
            raise ConfigError(
                f"{key}: unknown key {part!r}; allowed keys of {section}: {', '.join(fields)}"
                + keys_elsewhere(root, part)
            )
        field = fields[part]
        models = variants(field)
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


def _walk(root: type[BaseModel], loc: Sequence[Any]) -> tuple[list[str], dict[Any, type[BaseModel]]]:
    """An error's location: (the dotted key's parts, variant tags left out; the models where it ends)."""
    models: dict[Any, type[BaseModel]] = {None: root}
    parts: list[str] = []
    value: Any = None  # the field once the location reaches a value rather than a section
    depth = 0  # the key's length there
    for part in loc:
        if isinstance(part, int):  # an item of a list section: same model
            continue
        if value is not None:  # past a value: a map's key belongs to the key, a union member's tag not
            if _is_map(value) and len(parts) == depth:
                parts.append(str(part))
            continue
        if None not in models and part in models:  # the variant of a tagged union that was chosen
            models = {part: models[part]}
            continue
        fields = section_fields(models)
        parts.append(str(part))
        models = variants(fields[part]) if part in fields else {}
        if part in fields and not models:
            value, depth = fields[part], len(parts)
    return parts, models


def _extra_key(root: type[BaseModel], loc: Sequence[Any], value: Any) -> str:
    """'key: ...' for a key its section does not take (read by another variant, or by none)."""
    name, parent = loc[-1], loc[:-1]
    parts, models = _walk(root, parent)
    key, section = ".".join([*parts, str(name)]), ".".join(parts) or "the top level"
    chosen = next(iter(models)) if len(models) == 1 else None
    if chosen is None:
        allowed = ", ".join(section_fields(models))
        return f"{key}: unknown key {name!r}; allowed keys of {section}: {allowed}" + keys_elsewhere(
            root, name
        )
    union = _walk(root, parent[:-1])[1]
    tag = tag_key(union)
    readers = [t for t, m in union.items() if name in m.model_fields]
    if readers:
        return (
            f"{key}: {value!r} is read only with {section}.{tag} {quoted(readers)} "
            f"({section}.{tag} is {chosen!r}); remove it or set {section}.{tag}"
        )
    allowed = ", ".join(models[chosen].model_fields)
    return (
        f"{key}: unknown key {name!r}; allowed keys of {section} ({tag} {chosen!r}): {allowed}"
        + keys_elsewhere(root, name)
    )


def keys_elsewhere(root: type[BaseModel], name: Any) -> str:
    """'; did you mean sft.lr or optim.lr?' when other sections have a key of that name (a key given
    in the wrong section: grpo.lr), else ''."""
    found = list(dict.fromkeys(key for key, _, _ in leaf_keys(root) if key.rsplit(".", 1)[-1] == str(name)))
    return f"; did you mean {' or '.join(found)}?" if found else ""


def leaf_keys(root: type[BaseModel], prefix: str = "", variant: str = "") -> Iterator[tuple[str, str, Any]]:
    """Every leaf key under `root` as (dotted key, variant, FieldInfo), walking into nested sections,
    each variant of a tagged union (variant names it, e.g. 'model.source=hf'), and the models of
    lists and maps. A generated reference lists these; a test requires a description on each."""
    for name, field in root.model_fields.items():
        key = f"{prefix}{name}"
        models = variants(field)
        if not models:
            yield key, variant, field
            continue
        tag = tag_key(models)
        for value, model in models.items():
            where = f"{key}.{tag}={value}" if tag is not None else variant
            yield from leaf_keys(model, f"{key}.", where)


def describe_error(root: type[BaseModel], error: Mapping[str, Any]) -> str:
    """One line for one pydantic error: 'dotted.key: value is not allowed; what is allowed'."""
    loc = [p for p in error["loc"] if p != "function-after"]
    key = ".".join(_walk(root, loc)[0]) or "config"
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        return _extra_key(root, loc, error["input"])
    if kind == "union_tag_invalid":  # a tagged union's key names no variant
        tag = str(ctx.get("discriminator", "")).strip("'")
        value = error["input"].get(tag) if isinstance(error["input"], Mapping) else error["input"]
        return f"{key}.{tag}: {value!r} is not allowed; expected one of {ctx.get('expected_tags', '')}"
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
