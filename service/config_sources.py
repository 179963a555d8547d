"""Where config data comes from before validation: a YAML file, `dotted.key=value` overrides, merging.

Plain dicts in, plain dicts out; keys are checked against the root model given (the service's
`ServiceConfig`) so that a misspelt override fails here, naming the key.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from service.config_keys import ConfigError, field_at, tag_key, variants, wants_string

_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from `path` (ConfigError when it cannot be read or is not a mapping)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"--config {path}: not valid YAML{line}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of sections, got {type(data).__name__}")
    if (bad := _non_text_key(data)) is not None:
        key, where = bad
        raise ConfigError(f"--config {path}: every key must be text, got {key!r}{where}")
    return data


def _non_text_key(data: Mapping[Any, Any], prefix: str = "") -> tuple[Any, str] | None:
    """The first key that is not text (YAML reads `?`, `1:` or `null:` as such), and where it is."""
    for key, value in data.items():
        if not isinstance(key, str):
            return key, f" in {prefix}" if prefix else ""
        if isinstance(value, Mapping) and (
            bad := _non_text_key(value, f"{prefix}{'.' if prefix else ''}{key}")
        ):
            return bad
    return None


def parse_override(override: str, root: type[BaseModel]) -> tuple[str, Any]:
    """('dotted.key', value) from 'dotted.key=value'; the value is read as YAML ('null', '8', '[1, 2]')."""
    key, sep, raw = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {override!r}: expected dotted.key=value, e.g. grpo.steps=100")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError(f"{key}: {raw!r} is not a YAML value") from None
    field_at(root, key)
    if isinstance(value, str) and _FLOAT.match(value):
        value = float(value)  # YAML 1.1 reads '1e-3' as text; a config means the number
    if isinstance(value, int | float | bool) and wants_string(root, key):
        value = raw.strip()  # run.name=2024 means the string '2024'
    return key, value


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """data[a][b][c] = value for key 'a.b.c', creating sections on the way."""
    parts = key.split(".")
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            section = ".".join(parts[: depth + 1])
            raise ConfigError(f"{key}: {section} is a value, not a section")
        node = child
    node[parts[-1]] = value


def deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `base` with `over` merged in (nested mappings merge, everything else replaces)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def switch_variants(data: dict[str, Any], later: Mapping[str, Any], root: type[BaseModel]) -> dict[str, Any]:
    """`data` ready for a later source to go on top: where `later` switches a section with variants
    to another one (`model.source`, `task.name`), the keys of `data`'s section that the new variant
    does not take are dropped (a preset's builtin `model.size` under `--set model.source=hf`); the
    later source's own keys are never dropped."""
    out = dict(data)
    for name, field in root.model_fields.items():
        models = variants(field)
        key = tag_key(models)
        old, new = out.get(name), later.get(name)
        if (
            key is None
            or not isinstance(old, dict)
            or not isinstance(new, Mapping)
            or not isinstance(new.get(key), str)
        ):
            continue
        if old.get(key, getattr(field.default, key, None)) != new[key] and new[key] in models:
            taken = models[new[key]].model_fields
            out[name] = {k: v for k, v in old.items() if k in taken}
    return out
