"""The configuration reference, generated from the typed configs: every key of every section.

    python -m service.config_reference                 # writes docs/reference/config.md
    python -m service.config_reference --check         # exit 1 when the committed file differs
    python -m service.train --help-config grpo         # one section, as text

Each entry is read from the pydantic models (`ServiceConfig` and what it holds): the dotted key,
its type with the allowed values and bounds, the default, the description, and the presets that
set it. A section that is a union of variants (told apart by a discriminator key) is listed once
per variant, so the reference says which keys each variant owns.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from service.config import ServiceConfig
from service.config_moved import MOVED, moved_override
from service.presets import PRESETS

REFERENCE_PATH = Path(__file__).resolve().parents[1] / "docs" / "reference" / "config.md"
_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >=", "max_length": "length <="}


@dataclass(frozen=True)
class Entry:
    """One leaf key of the config."""

    key: str  # dotted; `[]` marks a list of sections, `<name>` a mapping of them
    variant: str  # "" or "source: hf" for a key that only one variant of its section has
    type: str
    default: str
    description: str
    selector: tuple[str, str, str] = ("", "", "")  # (dotted discriminator, its value, the default value)

    @property
    def section(self) -> str:
        return self.key.split(".")[0].removesuffix("[]")


def _strip_annotated(annotation: Any) -> tuple[Any, list[Any]]:
    metadata: list[Any] = []
    while typing.get_origin(annotation) is typing.Annotated:
        args = typing.get_args(annotation)
        annotation, metadata = args[0], [*metadata, *args[1:]]
    return annotation, metadata


def _union_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return ()


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The section models an annotation holds: `X`, `X | None`, or a union of variants."""
    annotation, _ = _strip_annotated(annotation)
    if _is_model(annotation):
        return [annotation]
    found = []
    for arg in _union_args(annotation):
        arg, _ = _strip_annotated(arg)
        if _is_model(arg):
            found.append(arg)
    return found


def _container(annotation: Any) -> tuple[str, type[BaseModel] | None]:
    """('[]', Model) for list[Model], ('<name>', Model) for dict[str, Model], else ('', None)."""
    annotation, _ = _strip_annotated(annotation)
    for arg in (annotation, *_union_args(annotation)):
        origin, args = typing.get_origin(arg), typing.get_args(arg)
        if origin is list and args and _is_model(_strip_annotated(args[0])[0]):
            return "[]", _strip_annotated(args[0])[0]
        if origin is dict and len(args) == 2 and _is_model(_strip_annotated(args[1])[0]):
            return ".<name>", _strip_annotated(args[1])[0]
    return "", None


def type_text(annotation: Any) -> str:
    """A reader's name for a field's type: `int >= 1`, `one of 'token', 'sequence'`, `float | none`."""
    annotation, metadata = _strip_annotated(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        text = "one of " + ", ".join(repr(v) for v in typing.get_args(annotation))
    elif args := _union_args(annotation):
        text = " | ".join(type_text(a) for a in args)
    elif typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation) or (Any,)
        text = f"list of {type_text(item)}"
    elif typing.get_origin(annotation) is dict:
        key, value = typing.get_args(annotation) or (Any, Any)
        text = f"mapping of {type_text(key)} to {type_text(value)}"
    elif annotation is type(None):
        text = "none"
    elif isinstance(annotation, type):
        text = annotation.__name__
    else:
        text = str(annotation).replace("typing.", "")
    return _with_bounds(text, metadata)


def _with_bounds(text: str, metadata: list[Any]) -> str:
    bounds = list(_bounds(metadata))
    return f"{text} {', '.join(bounds)}" if bounds else text


def _bounds(metadata: list[Any]) -> Iterator[str]:
    for item in metadata:
        for attr, sign in _BOUNDS.items():
            value = getattr(item, attr, None)
            if value is not None:
                yield f"{sign} {value}"
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str):
            yield f"matching `{pattern}`"


def _field_type(field: FieldInfo) -> str:
    return _with_bounds(type_text(field.annotation), list(field.metadata))


def _default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if value is None:
        return "none"
    return json.dumps(value) if not isinstance(value, str) else value


def _discriminator(field: FieldInfo) -> str | None:
    found = field.discriminator
    if isinstance(found, str):
        return found
    _, metadata = _strip_annotated(field.annotation)
    for item in metadata:
        if isinstance(getattr(item, "discriminator", None), str):
            return item.discriminator
    return None


def _variant_name(model: type[BaseModel], discriminator: str) -> str:
    field = model.model_fields[discriminator]
    annotation, _ = _strip_annotated(field.annotation)
    values = typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else ()
    value = values[0] if len(values) == 1 else field.default
    return f"{discriminator}: {value}"


def _default_variant(field: FieldInfo, discriminator: str) -> str:
    """The discriminator's value in a union section's default ('' when the section has none)."""
    default = field.default_factory() if field.default_factory is not None else field.default
    return str(getattr(default, discriminator, "")) if isinstance(default, BaseModel) else ""


def entries(
    model: type[BaseModel] = ServiceConfig,
    prefix: str = "",
    variant: str = "",
    selector: tuple[str, str, str] = ("", "", ""),
) -> list[Entry]:
    """Every leaf key under `model`, in declaration order; a union section once per variant."""
    found: list[Entry] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        suffix, item_model = _container(field.annotation)
        models = _models_in(field.annotation)
        if item_model is not None:
            found += entries(item_model, f"{key}{suffix}.", variant, selector)
        elif len(models) > 1 and (discriminator := _discriminator(field)):
            default = _default_variant(field, discriminator)
            for each in models:
                name = _variant_name(each, discriminator)
                chosen = (f"{key}.{discriminator}", name.split(": ", 1)[1], default)
                found += entries(each, f"{key}.", name, chosen)
        elif models and not _allows_plain_values(field.annotation):
            found += entries(models[0], f"{key}.", variant, selector)
        else:
            description = " ".join((field.description or "").split())
            found.append(Entry(key, variant, _field_type(field), _default_text(field), description, selector))
    return found


def _allows_plain_values(annotation: Any) -> bool:
    """A field that is a section or a plain value (`int | Section`) is listed as a value."""
    annotation, _ = _strip_annotated(annotation)
    return any(not _is_model(_strip_annotated(a)[0]) and a is not type(None) for a in _union_args(annotation))


def preset_settings(presets: Mapping[str, Mapping[str, Any]] = PRESETS) -> dict[str, list[str]]:
    """dotted key -> ['demo: 300', ...]: what each preset sets."""
    found: dict[str, list[str]] = {}

    def walk(data: Mapping[str, Any], prefix: str, preset: str) -> None:
        for name, value in data.items():
            if isinstance(value, Mapping) and value:
                walk(value, f"{prefix}{name}.", preset)
            else:
                shown = value if isinstance(value, str) else json.dumps(value)
                found.setdefault(f"{prefix}{name}", []).append(f"{preset}: {shown}")

    for preset, data in presets.items():
        walk(data, "", preset)
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "-"


def _presets_of(entry: Entry, settings: Mapping[str, list[str]]) -> str:
    parts = entry.key.split(".")
    # a preset setting a whole mapping key (pool.resources) is shown on that key
    found = settings.get(entry.key, []) or (
        settings.get(".".join(parts[:-1]), []) if entry.key.endswith("<name>") else []
    )
    return "; ".join(s for s in found if _preset_has_variant(s.split(": ", 1)[0], entry.selector))


def _preset_has_variant(preset: str, selector: tuple[str, str, str]) -> bool:
    """Whether `preset` selects the variant an entry belongs to (every preset for a plain key)."""
    key, value, default = selector
    if not key:
        return True
    data: Any = PRESETS.get(preset, {})
    for part in key.split("."):
        data = data.get(part) if isinstance(data, Mapping) else None
    return str(data if data is not None else default) == value


def render_markdown(found: list[Entry] | None = None) -> str:
    found = entries() if found is None else found
    settings = preset_settings()
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m service.config_reference` from the typed configs; do not edit. -->",
        "",
        f"Every key of a run's config ({len(found)} in all), by section: its type (with the allowed "
        "values and bounds), its default, the presets that set it, and what it does. Give them in a "
        "`--config` YAML file (sections as mappings) or one at a time with `--set section.key=value`; "
        "`python -m service.train --help-config SECTION` prints one section (or `KEY`, or a key's name "
        "alone: every key of that name). A section with "
        "variants (`model` by `source`, `task` by `name`, ...) lists each variant's own keys.",
        "",
    ]
    for section in dict.fromkeys(e.section for e in found):
        lines += [
            f"## `{section}`",
            "",
            "| key | type | default | presets | description |",
            "|---|---|---|---|---|",
        ]
        for e in (e for e in found if e.section == section):
            key = f"`{e.key}`" + (f" ({e.variant})" if e.variant else "")
            row = (key, e.type, f"`{e.default}`", _presets_of(e, settings), e.description)
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        lines.append("")
    return "\n".join(lines + _moved_lines())


def _moved_lines() -> list[str]:
    """The keys that moved to the tasks that read them (`service.config_moved`), still read where
    configs of earlier versions wrote them."""
    lines = [
        "## Keys that moved",
        "",
        "Written in their old place (a `--config` file, `--set`, a run directory's config.yaml), these "
        "keys are read where they are now; for a task that does not read one, a value other than its "
        "old default is refused in one line.",
        "",
        "| old key | now | read by the tasks |",
        "|---|---|---|",
    ]
    for key, moved in MOVED.items():
        lines.append(f"| `{key}` | `{moved_override(key)}` | {', '.join(moved.readers)} |")
    return [*lines, ""]


def render_section(section: str) -> str:
    """What `--help-config` prints: a section (`grpo`), a key (`grpo.beta`) or every key of a name
    (`temperature`, `lr`), as plain text; ValueError naming the sections when nothing matches."""
    found = entries()
    sections = list(dict.fromkeys(e.section for e in found))
    name = section.rsplit(".", 1)[-1]
    chosen = [e for e in found if e.section == section] or [e for e in found if _plain(e.key) == section]
    out = []
    if not chosen:  # a key's name alone, or a key given in another section than its own (grpo.lr)
        chosen = [e for e in found if _plain(e.key).rsplit(".", 1)[-1] == name]
        if chosen and name != section:
            out.append(f"{section} is no key; the keys named {name!r}:")
    if not chosen:
        raise ValueError(
            f"--help-config: no section, key or key name {section!r}; sections: {', '.join(sections)}"
        )
    settings = preset_settings()
    for e in chosen:
        out.append(e.key + (f"  ({e.variant})" if e.variant else ""))
        out.append(f"    {e.type}; default {e.default}")
        if presets := _presets_of(e, settings):
            out.append(f"    presets: {presets}")
        out.append(f"    {e.description or '(no description)'}")
    return "\n".join(out)


def _plain(key: str) -> str:
    """A reference key as it is written in --set: `reward.user[].fn` -> `reward.user.fn`."""
    return re.sub(r"\[\]|\.<[^>]+>", "", key)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m service.config_reference", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--out", type=Path, default=REFERENCE_PATH, help="where to write (default: %(default)s)"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when --out differs from what would be written"
    )
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is out of date: run python -m service.config_reference", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(entries())} keys)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
