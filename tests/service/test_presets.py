"""The presets: YAML files shipped with the package, the same kind of file as a user's `--config`."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from service.config import load_config
from service.presets import DEFAULT_PRESET, PRESET_NAMES, PRESETS, preset_path

REPO = Path(__file__).resolve().parents[2]
FOLDER = preset_path(DEFAULT_PRESET).parent


def test_every_yaml_file_of_the_folder_is_a_preset_in_the_listed_order():
    assert sorted(p.stem for p in FOLDER.glob("*.yaml")) == sorted(PRESET_NAMES)
    assert list(PRESETS) == list(PRESET_NAMES) and PRESET_NAMES[:3] == ("smoke", "demo", "gpt2-4090")


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_each_file_says_how_to_run_it_and_holds_what_the_preset_holds(name):
    text = preset_path(name).read_text()
    header = text.split("\n\n", 1)[0]
    assert all(line.startswith("#") for line in header.splitlines())
    assert f"python -m service.train --preset {name}" in header
    assert yaml.safe_load(text) == PRESETS[name]


def test_the_default_preset_file_given_as_config_resolves_to_the_preset():
    # `python -m service.train --config service/presets/demo.yaml` runs what `--preset demo` runs
    assert load_config(config_file=str(preset_path(DEFAULT_PRESET))) == load_config(DEFAULT_PRESET)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_a_preset_file_as_config_over_its_own_preset_changes_nothing(name):
    assert load_config(name, config_file=str(preset_path(name))) == load_config(name)


def test_the_files_are_package_data():
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert data["tool"]["setuptools"]["package-data"]["service.presets"] == ["*.yaml"]
    assert FOLDER == REPO / "service" / "presets"


def test_a_variant_switch_drops_the_earlier_sources_keys_of_the_other_variant(tmp_path):
    # demo's model is builtin (size, block_size): switching to hf keeps the shared block_size only
    cfg = load_config("demo", overrides=["model.source=hf", "model.path=/models/x"])
    assert cfg.model.source == "hf" and cfg.model.path == "/models/x" and cfg.model.block_size == 128
    file = tmp_path / "c.yaml"
    file.write_text("task:\n  name: text\n  path: rows.jsonl\nreward:\n  user: [{fn: f}]\n")
    moved = load_config("move-smoke", config_file=str(file))  # move's engine keys do not follow
    assert moved.task.name == "text" and moved.task.path == "rows.jsonl"
