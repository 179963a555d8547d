"""The service config: presets, sources and their order, one-line errors, YAML round trip, run dirs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from service.config import (
    PRESETS,
    ConfigError,
    ServiceConfig,
    config_to_yaml,
    load_config,
    parse_override,
    trainer_config,
    validate_config,
)
from service.config_moved import MOVED
from service.presets import DEFAULT_PRESET
from service.run_dir import fresh_config, new_run_id, prepare_run_dir, resolve_run, resumed_config
from tests.service.train_child import run_train
from trainer.config import TrainerConfig
from trainer.schedule import Schedule


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_resolves_and_round_trips_through_yaml(preset, tmp_path):
    cfg = load_config(preset)
    saved = tmp_path / "config.yaml"
    saved.write_text(config_to_yaml(cfg))
    assert load_config(preset, config_file=str(saved)) == cfg
    # and from any other preset too: the file is a complete config
    other = "smoke" if preset != "smoke" else "demo"
    assert load_config(other, config_file=str(saved)) == cfg


def test_default_preset_is_demo_and_presets_have_their_shape():
    assert DEFAULT_PRESET == "demo"
    assert load_config() == load_config("demo")
    gpt2 = load_config("gpt2-4090")
    assert (gpt2.model.n_layer, gpt2.model.n_head, gpt2.model.n_embd) == (12, 12, 768)
    assert gpt2.precision.dtype == "bf16" and gpt2.scaling.use_gpu and gpt2.scaling.num_workers >= 2
    smoke = load_config("smoke")
    assert (
        smoke.scaling.use_gpu is False and Schedule.of(smoke).total < Schedule.of(load_config("demo")).total
    )


def test_later_sources_win(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text("grpo:\n  steps: 7\n  beta: 0.5\nsampling:\n  temperature: 0.7\n")
    cfg = load_config("smoke", config_file=str(file), overrides=["grpo.steps=9", "sampling.top_k=5"])
    assert cfg.grpo.steps == 9  # --set over the file
    assert cfg.grpo.beta == 0.5  # the file over the preset
    assert cfg.sampling.temperature == 0.7
    assert cfg.sampling.top_k == 5
    assert cfg.sft.steps == PRESETS["smoke"]["sft"]["steps"]  # the preset where nothing overrides it


def test_override_values_are_yaml_scalars():
    assert parse_override("sampling.top_k=null") == ("sampling.top_k", None)
    assert parse_override("optim.betas=[0.9, 0.99]") == ("optim.betas", [0.9, 0.99])
    assert parse_override("grpo.beta=1e-3") == ("grpo.beta", 1e-3)
    assert parse_override("scaling.use_gpu=true") == ("scaling.use_gpu", True)
    assert parse_override("grpo.scale=none") == ("grpo.scale", "none")  # a string, not YAML null
    assert load_config(overrides=["run.name=2024"]).run.name == "2024"  # a string field keeps the text


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["grpo.scale=foo"], "grpo.scale: 'foo' is not allowed; expected one of 'group', 'batch', 'none'"),
        (["grpo.steps=-1"], "grpo.steps: -1 is not allowed; must be greater than or equal to 0"),
        (["scaling.num_workers=lots"], "scaling.num_workers: 'lots' is not allowed; must be a valid integer"),
        (["grpo.nope=1"], "grpo.nope: unknown key 'nope'; allowed keys of grpo: steps, prompts_per_step"),
        (["nope=1"], "nope: unknown key 'nope'; allowed keys of the top level: seed, model, data"),
        (["grpo.steps.x=1"], "grpo.steps.x: grpo.steps is a value, not a section"),
        (["grpo=5"], "grpo: 5 is not allowed; expected a section"),
        (["task.min_plies=9"], "task: min_plies (9) must be <= max_plies"),
        (["grpo.steps"], "--set 'grpo.steps': expected dotted.key=value"),
        (
            ["scaling.num_workers=2", "grpo.prompts_per_step=15"],
            "grpo.prompts_per_step (15) must be a multiple of",
        ),
        (["run.name=a b"], "run.name: 'a b' is not allowed; must match pattern"),
        (
            ["pool.resources.CPU=1"],
            "pool.resources: 'CPU' is a built-in resource; set it with pool.cpus_per_worker",
        ),
        (["pool.resources.reward_node=0"], "pool.resources: reward_node: 0.0 is not allowed"),
        (
            ["scaling.resources_per_worker={'a b': 1}"],
            "scaling.resources_per_worker: 'a b' is not a resource name",
        ),
        (["pool.label_selector={'bad key!': x}"], "pool.label_selector: 'bad key!' is not a node label key"),
        (
            ["scaling.label_selector.role=in(a,)"],
            "scaling.label_selector: role: 'in(a,)' is not a label selector",
        ),
        (["pool.resources.a.b=1"], "pool.resources.a.b: pool.resources is a value, not a section"),
        (
            ["run.storage_path=s3://bucket/runs"],
            "run.storage_path: 's3://bucket/runs' is a URI; expected a filesystem path",
        ),
    ],
)
def test_bad_values_give_one_line_naming_the_key(overrides, expected):
    with pytest.raises(ConfigError) as info:
        load_config("demo", overrides=overrides)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(expected), message


def test_unknown_key_in_a_file_lists_the_allowed_keys(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text("sampling:\n  temprature: 0.5\n")
    with pytest.raises(
        ConfigError,
        match=r"^sampling\.temprature: unknown key 'temprature'; allowed keys of sampling: group_size",
    ):
        load_config(config_file=str(file))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- 1\n- 2\n", "expected a mapping"),
        ("a: [1,\n", "not valid YAML"),
        ("?\n", "every key must be text, got None$"),  # YAML's empty key: {None: None}
        ("sampling:\n  1: 2\n", "every key must be text, got 1 in sampling$"),
    ],
)
def test_a_file_that_is_not_a_config(tmp_path, text, expected):
    file = tmp_path / "c.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError, match=expected):
        load_config(config_file=str(file))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(config_file=str(tmp_path / "missing.yaml"))


def test_unknown_preset():
    with pytest.raises(
        ConfigError, match=r"^preset: 'big' is not allowed; expected one of 'smoke', 'demo', 'gpt2-4090'"
    ):
        load_config("big")


def test_placement_maps_take_whole_maps_or_one_entry():
    cfg = load_config(
        "smoke",
        overrides=[
            "pool.resources.reward_node=1",
            "pool.label_selector={grpo.io/role: reward, zone: '!in(a,b)'}",
            "scaling.resources_per_worker={trainer_node: 0.5}",
        ],
    )
    assert cfg.pool.resources == {"reward_node": 1.0}
    assert cfg.pool.label_selector == {"grpo.io/role": "reward", "zone": "!in(a,b)"}
    assert cfg.scaling.resources_per_worker == {"trainer_node": 0.5} and cfg.scaling.label_selector == {}
    assert load_config("smoke").pool.resources == {}  # default: no placement constraint


def test_trainer_config_is_exactly_the_trainer_sections():
    cfg = load_config("smoke", overrides=["grpo.beta=0.1"])
    tcfg = trainer_config(cfg)
    assert type(tcfg) is TrainerConfig and tcfg.grpo.beta == 0.1
    assert set(TrainerConfig.model_fields) < set(ServiceConfig.model_fields)


def test_run_id_and_run_dir_are_resolved_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_id = new_run_id()
    assert run_id.startswith("grpo-") and len(run_id.split("-")) == 4
    cfg = resolve_run(load_config("smoke"))
    assert cfg.run.name and Path(cfg.run.run_dir) == tmp_path / "runs" / cfg.run.name
    shared = resolve_run(
        load_config("smoke", overrides=["run.name=r1", f"run.storage_path={tmp_path}/shared"])
    )
    assert Path(shared.run.run_dir) == tmp_path / "shared" / "r1"
    explicit = resolve_run(load_config("smoke", overrides=["run.name=r1"]), run_dir="elsewhere")
    assert Path(explicit.run.run_dir) == tmp_path / "elsewhere"


def test_a_fresh_run_refuses_an_existing_run_dir_and_resume_reads_it_back(tmp_path):
    run_dir = tmp_path / "run"
    cfg = fresh_config("smoke", None, ["grpo.steps=3", "run.name=r7"], str(run_dir))
    prepare_run_dir(cfg)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["grpo"]["steps"] == 3
    assert (run_dir / "checkpoints").is_dir()
    fresh_config("smoke", None, [], str(run_dir))  # no step taken there: nothing to continue
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "phase": "sft"}\n')
    with pytest.raises(ConfigError, match="already holds a run; pass --resume"):
        fresh_config("smoke", None, [], str(run_dir))
    resumed = resumed_config(None, ["grpo.steps=5"], str(run_dir))
    assert resumed.grpo.steps == 5 and resumed.run.name == "r7"
    assert resumed.model_dump(exclude={"grpo"}) == cfg.model_dump(exclude={"grpo"})
    with pytest.raises(ConfigError, match="holds no config.yaml"):
        resumed_config(None, [], str(tmp_path / "nothing"))
    with pytest.raises(ConfigError, match="--run-dir DIR or --set run.name"):
        resumed_config(None, [], None)


def test_resume_finds_the_run_by_its_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prepare_run_dir(fresh_config("smoke", None, ["run.name=by-id"], None))
    assert resumed_config(None, ["run.name=by-id"], None).run.run_dir == str(tmp_path / "runs" / "by-id")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_train(*args, timeout=120)


def test_cli_bad_config_exits_2_with_one_line(tmp_path):
    result = _cli("--preset", "smoke", "--set", "grpo.scale=foo", "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "config error: grpo.scale: 'foo' is not allowed; expected one of 'group', 'batch', 'none'"
    ]
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "r").exists()  # nothing was started


def test_cli_resume_with_another_preset_is_refused_naming_the_key(tmp_path):
    prepare_run_dir(fresh_config("smoke", None, ["run.name=r8"], str(tmp_path / "run")))
    result = _cli("--preset", "demo", "--resume", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("config error: --preset demo: gives model.size='tiny', but the run in ")
    assert "was saved with model.size='custom'; drop --preset to resume it as saved" in result.stderr


@pytest.mark.parametrize(
    "override", ["grpo.beta=.inf", "optim.lr=.nan", "pool.chunk_timeout_s=.inf", "task.exact_weight=-.inf"]
)
def test_non_finite_numbers_are_refused_in_every_section(override):
    with pytest.raises(ConfigError, match=r"is not allowed; must be a finite number") as err:
        load_config("smoke", overrides=[override])
    assert str(err.value).startswith(override.split("=")[0] + ":") and "\n" not in str(err.value)


def test_cli_non_finite_beta_exits_2_with_one_line(tmp_path):
    result = _cli("--preset", "smoke", "--set", "grpo.beta=.inf", "--run-dir", str(tmp_path / "r"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "config error: grpo.beta: inf is not allowed; must be a finite number"
    ]
    assert not (tmp_path / "r").exists()


def test_unknown_task_is_refused_naming_the_tasks():
    with pytest.raises(
        ConfigError,
        match=r"^task.name: 'chess' is not allowed; expected one of 'fen', 'code', 'env', 'move', 'text'$",
    ):
        load_config("smoke", overrides=["task.name=chess"])


def test_the_embedded_ray_offers_what_the_placement_keys_ask_for():
    from service.ray_start import custom_resources_needed, local_node_labels

    cfg = load_config(
        "smoke",
        overrides=[
            "pool.num_workers=3",
            "pool.resources={reward_node: 1, disk: 0.5}",
            "scaling.resources_per_worker.disk=2",
            "pool.label_selector={role: reward, zone: '!a'}",
            "scaling.label_selector={accel: 'in(x,y)', tier: gpu}",
        ],
    )
    assert custom_resources_needed(cfg) == {"reward_node": 3.0, "disk": 1.5 + 2.0}
    assert local_node_labels(cfg) == {"role": "reward", "tier": "gpu"}  # plain values only
    assert (
        custom_resources_needed(load_config("smoke")) == {} and local_node_labels(load_config("smoke")) == {}
    )


def test_the_chess_keys_written_under_data_load_where_they_are_now(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("data: {min_plies: 2, max_plies: 3, natural: true, eval_size: 8}\n")
    cfg = load_config("smoke", str(old))
    assert (cfg.task.name, cfg.task.min_plies, cfg.task.max_plies, cfg.task.natural) == ("fen", 2, 3, True)
    assert cfg.data.eval_size == 8 and "min_plies" not in cfg.data.model_dump()
    assert load_config("move-smoke", overrides=["data.max_plies=5"]).task.max_plies == 5
    old_data = {key.partition(".")[2]: m.old_default for key, m in MOVED.items() if key.startswith("data.")}
    resolved = {**cfg.model_dump(mode="json"), "data": {**cfg.data.model_dump(), **old_data}}
    resolved["task"] = {"name": "text", "path": "x.jsonl"}  # a text run's config.yaml of that time
    resolved["reward"] = {"user": [{"fn": "rewards.code:code_reward"}]}
    assert "min_plies" not in validate_config(resolved).task.model_dump()  # defaults dropped
    with pytest.raises(
        ConfigError, match=r"^data.min_plies is now task.min_plies, read by the fen and move tasks only"
    ):
        validate_config({**resolved, "data": {**resolved["data"], "min_plies": 3}})


def test_the_fen_weights_written_under_reward_load_where_they_are_now(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("reward: {similarity_weight: 0.7, cache_size: 0, max_chars: 300}\n")
    cfg = load_config("smoke", str(old))
    assert (cfg.task.similarity_weight, cfg.task.cache_size, cfg.reward.max_chars) == (0.7, 0, 300)
    assert load_config("smoke", overrides=["reward.exact_weight=0.5"]).task.exact_weight == 0.5
    # a move run's config.yaml of that time held the fen weights at their defaults: they are dropped
    resolved = load_config("move-smoke").model_dump(mode="json")
    resolved["reward"] = {**resolved["reward"], "validity_weight": 0.25, "exact_weight": 0.25}
    assert validate_config(resolved) == load_config("move-smoke")
    with pytest.raises(ConfigError) as refused:
        validate_config({**resolved, "reward": {**resolved["reward"], "validity_weight": 0.3}})
    assert str(refused.value) == (
        "reward.validity_weight is now task.validity_weight, read by the fen task only; task.name is 'move'"
    )
    with pytest.raises(ConfigError, match=r"^task.validity_weight: 0.3 is read only with task.name 'fen'"):
        load_config("move-smoke", overrides=["reward.validity_weight=0.3"])


def test_ray_trains_workers_get_the_wait_policys_environment_on_a_cluster_joined():
    from service.run_backend import build_trainer

    cfg = load_config("smoke", None, ["run.name=omp", "run.run_dir=/tmp/omp-env-run"])
    passive = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
    assert build_trainer(cfg, None, None, passive).run_config.worker_runtime_env == {"env_vars": passive}
    assert not build_trainer(cfg, None, None, {}).run_config.worker_runtime_env


def test_a_key_given_in_another_section_is_pointed_to_where_it_lives(tmp_path):
    with pytest.raises(ConfigError) as by_set:
        load_config("smoke", overrides=["grpo.lr=0.01"])
    assert str(by_set.value).startswith("grpo.lr: unknown key 'lr'; allowed keys of grpo: steps, ")
    assert str(by_set.value).endswith("; did you mean sft.lr or optim.lr?")
    config = tmp_path / "run.yaml"
    config.write_text("grpo:\n  temperature: 0.5\n")
    with pytest.raises(
        ConfigError, match=r"^grpo\.temperature: unknown key .*; did you mean sampling\.temperature\?$"
    ):
        load_config("smoke", str(config))
    with pytest.raises(ConfigError) as nowhere:
        load_config("smoke", overrides=["grpo.stepz=1"])
    assert "did you mean" not in str(nowhere.value)
