"""Every config key carries a description (the generated reference and `--help` print it)."""

from __future__ import annotations

from service.config import ServiceConfig
from service.config_keys import leaf_keys


def _described(field) -> bool:
    return bool(field.description and field.description.strip())


def test_every_leaf_key_has_a_description():
    missing = sorted(
        {
            f"{key} ({variant})" if variant else key
            for key, variant, f in leaf_keys(ServiceConfig)
            if not _described(f)
        }
    )
    assert not missing, f"{len(missing)} config keys have no description: {', '.join(missing)}"


def test_the_walk_reaches_nested_sections_lists_and_every_variant():
    keys = {(key, variant) for key, variant, _ in leaf_keys(ServiceConfig)}
    assert ("grpo.steps", "") in keys
    assert ("reward.user.fn", "") in keys  # the model of a list
    assert ("model.path", "model.source=hf") in keys and ("model.n_layer", "model.source=builtin") in keys
    assert ("model.lora.r", "model.source=hf") in keys  # an optional section inside a variant
    assert ("task.path", "task.name=text") in keys and ("task.engine.nodes", "task.name=move") in keys
