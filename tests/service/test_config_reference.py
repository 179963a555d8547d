"""The generated configuration reference: committed as generated, and covering every key."""

from __future__ import annotations

from typing import Any

import pytest

from service.config import ServiceConfig
from service.config_reference import REFERENCE_PATH, entries, main, render_markdown, render_section
from service.train import main as train_main


def _schema_leaves(schema: dict[str, Any], node: dict[str, Any], prefix: str = "") -> list[str]:
    """Leaf keys counted from pydantic's JSON schema (an account independent of the reference's
    own walk over the models): a property that is an object with properties is a section, each
    variant of a union of such objects one section each; anything else is a key."""
    defs = schema.get("$defs", {})

    def resolve(n: dict[str, Any]) -> list[dict[str, Any]]:
        if "$ref" in n:
            return resolve(defs[n["$ref"].split("/")[-1]])
        for union in ("anyOf", "oneOf", "allOf"):
            if union in n:
                return [o for part in n[union] for o in resolve(part)]
        return [n]

    leaves: list[str] = []
    for name, prop in node.get("properties", {}).items():
        sections = [o for o in resolve(prop) if "properties" in o]
        plain = [o for o in resolve(prop) if "properties" not in o and o.get("type") != "null"]
        if sections and not plain:
            for section in sections:
                leaves += _schema_leaves(schema, section, f"{prefix}{name}.")
        elif prop.get("type") == "array" and "properties" in resolve(prop.get("items", {}))[0]:
            leaves += _schema_leaves(schema, resolve(prop["items"])[0], f"{prefix}{name}[].")
        else:
            leaves.append(f"{prefix}{name}")
    return leaves


def test_the_committed_reference_is_what_the_models_generate():
    assert REFERENCE_PATH.is_file(), (
        "docs/reference/config.md is missing: run python -m service.config_reference"
    )
    assert REFERENCE_PATH.read_text() == render_markdown(), (
        "docs/reference/config.md differs from the typed configs: run python -m service.config_reference"
    )
    assert main(["--check"]) == 0


def test_every_key_of_the_models_has_one_entry():
    schema = ServiceConfig.model_json_schema()
    from_schema = sorted(_schema_leaves(schema, schema))
    listed = sorted(e.key.replace(".<name>", "") for e in entries())
    assert listed == from_schema
    reference = REFERENCE_PATH.read_text()
    assert all(f"| `{e.key}`" in reference for e in entries())


def test_help_config_prints_one_section_and_refuses_an_unknown_one(capsys):
    assert train_main(["--help-config", "grpo"]) == 0
    out = capsys.readouterr().out
    assert "grpo.policy_loss" in out and "grpo.beta" in out and "pool." not in out
    assert render_section("grpo") in out
    assert train_main(["--help-config", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("--help-config: no section, key or key name 'nope'; sections: ") and "\n" not in err


@pytest.mark.parametrize(
    ("topic", "first", "keys"),
    [
        ("grpo.beta", "grpo.beta", ["grpo.beta"]),
        ("temperature", "sampling.temperature", ["sampling.temperature"]),
        ("lr", "sft.lr", ["sft.lr", "optim.lr"]),
        ("grpo.lr", "grpo.lr is no key; the keys named 'lr':", ["sft.lr", "optim.lr"]),
        ("reward.user.fn", "reward.user[].fn", ["reward.user[].fn"]),
    ],
)
def test_help_config_takes_a_key_or_a_keys_name(capsys, topic, first, keys):
    assert train_main(["--help-config", topic]) == 0
    headers = [line for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]
    assert headers == ([] if first in keys else [first]) + keys  # each key's lines below its own


def test_a_check_against_a_stale_file_fails(tmp_path, capsys):
    stale = tmp_path / "config.md"
    stale.write_text("# old\n")
    assert main(["--check", "--out", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["--out", str(stale)]) == 0 and main(["--check", "--out", str(stale)]) == 0
