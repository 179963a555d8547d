"""What `submit` sends: entrypoint, runtime env, metadata and the checks before any request."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from service.client.submission import (
    RUN_NAME_KEY,
    SERVICE_TAG,
    STOP_WAIT_S,
    build_submission,
    check_entrypoint_resources,
    check_run_id,
    new_run_id,
)
from service.presets import DEFAULT_PRESET

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A minimal checkout: the submission only requires service/train.py to exist."""
    (tmp_path / "service").mkdir()
    (tmp_path / "service" / "train.py").write_text("")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.yaml").write_text("seed: 1\n")
    return tmp_path


def build(**kwargs):
    defaults = dict(run_id="r1", preset=None, config_file=None, overrides=(), run_dir=None, env_vars=None)
    return build_submission(**(defaults | kwargs))


def test_entrypoint_runs_the_trainer_with_the_run_id_as_its_name(repo):
    sub = build(working_dir=repo, preset="smoke", overrides=["grpo.steps=3"], run_dir="/data/runs/r1")
    assert shlex.split(sub.entrypoint) == [
        "python", "-m", "service.train", "--preset", "smoke",
        "--set", "grpo.steps=3", "--set", f"{RUN_NAME_KEY}=r1", "--run-dir", "/data/runs/r1",
    ]  # fmt: skip
    assert sub.run_id == "r1"
    assert sub.metadata == {"service": SERVICE_TAG, "run_id": "r1", "preset": "smoke"}


def test_without_a_preset_the_trainer_default_is_recorded(repo):
    sub = build(working_dir=repo)
    assert "--preset" not in sub.entrypoint and sub.metadata["preset"] == DEFAULT_PRESET


def test_values_with_spaces_are_quoted_for_the_shell(repo):
    sub = build(working_dir=repo, overrides=["run.storage_path=/data/two words; rm -rf /"])
    assert "run.storage_path=/data/two words; rm -rf /" in shlex.split(sub.entrypoint)


def test_runtime_env_uploads_the_checkout_without_bulk_and_allows_a_graceful_stop(repo):
    env = build(working_dir=repo, env_vars={"HF_HOME": "/cache"}).runtime_env
    assert env["working_dir"] == str(repo.resolve())
    for bulky in ("runs/", ".git/", "checkpoints/", "*.pt", "**/auth_token"):
        assert bulky in env["excludes"]
    assert env["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"] == str(STOP_WAIT_S)
    assert env["env_vars"]["PYTHONUNBUFFERED"] == "1"  # progress lines reach the log as they happen
    assert env["env_vars"]["HF_HOME"] == "/cache"


def test_no_working_dir_means_no_upload_and_paths_as_given():
    sub = build(working_dir=None, config_file="/etc/grpo/run.yaml")
    assert "working_dir" not in sub.runtime_env and "excludes" not in sub.runtime_env
    assert ["--config", "/etc/grpo/run.yaml"] == shlex.split(sub.entrypoint)[3:5]


def test_config_file_travels_relative_to_the_working_dir(repo, monkeypatch):
    monkeypatch.chdir(repo)
    sub = build(working_dir=".", config_file="configs/mine.yaml")
    assert "--config configs/mine.yaml" in sub.entrypoint
    assert sub.metadata["config_file"] == "configs/mine.yaml"


def test_config_file_outside_the_upload_is_refused(repo, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "c.yaml"
    outside.write_text("seed: 1\n")
    with pytest.raises(ValueError, match="outside working_dir"):
        build(working_dir=repo, config_file=outside)


def test_missing_config_file_is_refused(repo):
    with pytest.raises(ValueError, match="does not exist"):
        build(working_dir=repo, config_file=repo / "nope.yaml")


def test_working_dir_without_the_trainer_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no service/train.py"):
        build(working_dir=tmp_path)


@pytest.mark.parametrize("bad", ["", "-leading-dash", "has space", "a/b", "x" * 65, "semi;colon"])
def test_bad_run_ids_are_refused_with_the_rule(bad):
    with pytest.raises(ValueError, match="letters, digits"):
        check_run_id(bad)


def test_generated_run_ids_are_valid_and_distinct():
    ids = {new_run_id() for _ in range(20)}
    assert len(ids) == 20
    assert all(check_run_id(run_id).startswith("grpo-") for run_id in ids)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("grpo.steps", "expected dotted.key=value"),
        ("=3", "expected dotted.key=value"),
        ("grpo.stepz=3", "unknown key 'stepz'; allowed keys of grpo: "),
        ("grpo.steps=-1", "grpo.steps: -1 is not allowed"),
        (f"{RUN_NAME_KEY}=other", "pass run_id instead"),
    ],
)
def test_bad_overrides_are_refused_naming_the_key(repo, override, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build(working_dir=repo, overrides=[override])


def test_unknown_preset_is_refused_with_the_allowed_ones(repo):
    with pytest.raises(ValueError, match="preset 'tiny' is not allowed; expected one of 'smoke', 'demo'"):
        build(working_dir=repo, preset="tiny")


def test_a_bad_config_file_is_refused_before_submitting(repo):
    (repo / "configs" / "bad.yaml").write_text("sampling:\n  group_size: 1\n")
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        build(working_dir=repo, config_file=repo / "configs" / "bad.yaml")


def test_without_upload_a_config_file_is_the_clusters_and_not_read_here():
    sub = build(working_dir=None, config_file="/only/on/the/cluster.yaml", overrides=["grpo.steps=2"])
    assert "--config /only/on/the/cluster.yaml" in sub.entrypoint


def test_a_single_string_is_not_taken_for_a_list_of_overrides(repo):
    with pytest.raises(ValueError, match="sequence"):
        build(working_dir=repo, overrides="grpo.steps=3")


def test_env_vars_must_be_strings(repo):
    with pytest.raises(ValueError, match="env_vars"):
        build(working_dir=repo, env_vars={"N": 3})


def test_the_repository_itself_is_a_valid_working_dir():
    assert build(working_dir=REPO).runtime_env["working_dir"] == str(REPO)


@pytest.mark.parametrize("amount", [-1, float("nan"), "2"])
def test_driver_resources_must_be_non_negative_numbers(amount):
    with pytest.raises(ValueError, match="entrypoint_num_gpus must be a number >= 0"):
        check_entrypoint_resources(num_cpus=1, num_gpus=amount)
