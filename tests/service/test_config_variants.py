"""Sections with variants: `model` by `source`, `task` by `name`; each variant owns its keys."""

from __future__ import annotations

import pytest
import yaml

from service.config import (
    ConfigError,
    ServiceConfig,
    config_to_yaml,
    load_config,
    parse_override,
    validate_config,
)
from service.config_keys import field_at, leaf_keys, variants
from service.tasks import TASK_TYPES, TASKS, MoveTaskConfig, TextTaskConfig
from tests.service.train_child import run_train
from trainer.config import TrainerConfig
from trainer.model_config import BuiltinModelConfig, HFModelConfig


def test_the_data_picks_the_variant_and_builtin_and_fen_are_the_defaults():
    assert type(TrainerConfig().model) is BuiltinModelConfig
    assert type(TrainerConfig(model={"size": "small"}).model) is BuiltinModelConfig
    assert type(TrainerConfig(model={"source": "hf"}).model) is HFModelConfig
    assert type(load_config("hf-smoke").model) is HFModelConfig
    assert type(load_config("move-smoke").task) is MoveTaskConfig
    assert load_config("smoke").task.name == "fen"
    # a variant of the task section for every registered task, each under its config's name
    assert {t.config_class.model_fields["name"].default: t for t in TASK_TYPES} == TASKS
    assert set(variants(ServiceConfig.model_fields["task"])) == set(TASKS)


@pytest.mark.parametrize(
    ("preset", "overrides", "expected"),
    [
        (
            "smoke",
            ["model.path=/models/x"],
            "model.path: '/models/x' is read only with model.source 'hf' (model.source is 'builtin'); "
            "remove it or set model.source",
        ),
        ("smoke", ["model.lora={r: 4}"], "model.lora: {'r': 4} is read only with model.source 'hf'"),
        ("hf-smoke", ["model.n_layer=3"], "model.n_layer: 3 is read only with model.source 'builtin'"),
        (
            "smoke",
            ["model.source=gguf"],
            "model.source: 'gguf' is not allowed; expected one of 'builtin', 'hf'",
        ),
        ("smoke", ["task.train_positions=5"], "task.train_positions: 5 is read only with task.name 'move'"),
        (
            "move-smoke",
            ["task.prompt_key=q"],
            "task.prompt_key: 'q' is read only with task.name 'code', 'text'",
        ),
        (
            "smoke",
            ["task.name=go"],
            "task.name: 'go' is not allowed; expected one of 'fen', 'code', 'env', 'move', 'text'",
        ),
        ("smoke", ["model.nope=1"], "model.nope: unknown key 'nope'; allowed keys of model: source,"),
    ],
)
def test_a_key_of_another_variant_is_one_line_naming_it_and_its_variant(preset, overrides, expected):
    with pytest.raises(ConfigError) as info:
        load_config(preset, overrides=overrides)
    assert "\n" not in str(info.value) and str(info.value).startswith(expected), str(info.value)


def test_in_a_file_an_unknown_key_lists_the_keys_of_its_variant(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text("model:\n  source: hf\n  nope: 1\n")
    with pytest.raises(
        ConfigError, match=r"^model.nope: unknown key 'nope'; allowed keys of model \(source 'hf'\): "
    ):
        load_config("smoke", config_file=str(file))


def test_cli_builtin_model_with_an_hf_key_exits_2_with_one_line(tmp_path):
    args = ("--preset", "smoke", "--run-dir", str(tmp_path / "r"))
    result = run_train(*args, sets=["model.revision=main"], timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "config error: model.revision: 'main' is read only with model.source 'hf' (model.source is "
        "'builtin'); remove it or set model.source"
    ]


def test_dotted_keys_of_every_variant_can_be_set():
    assert parse_override("model.path=/m") == ("model.path", "/m")
    assert parse_override("task.engine.nodes=100") == ("task.engine.nodes", 100)
    assert parse_override("task.path=2024.jsonl")[1] == "2024.jsonl"
    assert field_at(ServiceConfig, "model.n_layer").default == 2
    cfg = load_config("smoke", overrides=["task.name=text", "task.path=x.jsonl", "reward.user=[{fn: f}]"])
    assert type(cfg.task) is TextTaskConfig and cfg.task.path == "x.jsonl"


def test_every_variant_round_trips_through_yaml():
    for cfg in (load_config("hf-smoke"), load_config("move-smoke"), load_config("smoke")):
        assert validate_config(yaml.safe_load(config_to_yaml(cfg))) == cfg


def test_a_config_written_before_the_variants_still_loads():
    # a run directory's config.yaml then held every key of every variant, the unread ones at their defaults
    for preset in ("smoke", "hf-smoke", "move-smoke"):
        cfg = load_config(preset)
        data = yaml.safe_load(config_to_yaml(cfg))
        flat_task = {
            "path": None,
            "eval_path": None,
            "prompt_key": "prompt",
            "target_key": "target",
            "stop": [],
            "engine": {"nodes": 2000},
            "train_positions": 2000,
        }
        data["task"] = {**flat_task, **data["task"]}
        hf = {
            "path": None,
            "revision": None,
            "trust_remote_code": False,
            "attn_implementation": "sdpa",
            "lora": None,
            "adapter_path": None,
            "reference": "base",
        }
        builtin = {"size": "tiny", "n_layer": 2, "n_head": 4, "n_embd": 128, "dropout": 0.0}
        data["model"] = {**(hf if cfg.model.source == "builtin" else builtin), **data["model"]}
        assert validate_config(data) == cfg


def test_leaf_keys_name_the_variant_of_each_key():
    variants = {}
    for key, variant, _ in leaf_keys(ServiceConfig):
        variants.setdefault(key, set()).add(variant)
    assert variants["model.block_size"] == {"model.source=builtin", "model.source=hf"}  # shared
    assert variants["model.size"] == {"model.source=builtin"} and variants["task.stop"] == {
        "task.name=text",
        "task.name=code",
        "task.name=env",
    }


@pytest.mark.parametrize("value", ["[]", "{}", "[tiny]"])
def test_a_model_size_that_is_not_a_name_is_one_line(value):
    with pytest.raises(ConfigError) as caught:
        load_config("smoke", None, [f"model.size={value}"])
    assert str(caught.value).startswith("model.size: ") and "\n" not in str(caught.value)


def test_a_value_of_a_union_type_names_its_key_without_the_union_members_tag():
    with pytest.raises(ConfigError) as caught:
        load_config("smoke", None, ["scaling.sampling_threads=[]"])
    assert str(caught.value).startswith("scaling.sampling_threads: [] is not allowed; ")
