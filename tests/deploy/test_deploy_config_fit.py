"""The runs the deploy files start resolve with the service's own config loader and fit the cluster.

Each entrypoint is parsed (`python -m MODULE --preset P --set k=v ...`) and resolved in-process
with `service.config.load_config`, exactly as the driver would; then what the run asks Ray for
(GPU trainers, their CPUs, the reward pool's CPUs) is compared with what the worker groups give.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from deploy_files import (
    CLUSTER_YAML,
    DEPLOY,
    documents_of_kind,
    group_cpus,
    group_gpus,
    group_resources,
    load_documents,
    mount_paths,
    node_groups,
    parse_entrypoint,
    ray_container,
)

SHARED_CLAIM = "grpo-shared"


def _rayjob():
    (job,) = documents_of_kind("RayJob")
    return job


def _groups(spec) -> dict:
    return dict(node_groups(spec))


def _load(command: str):
    """The ServiceConfig the command's driver would build."""
    from service.config import load_config

    _, preset, overrides = parse_entrypoint(command)
    assert preset is not None, f"{command!r} names no preset"
    return load_config(preset=preset, overrides=tuple(overrides))


def _resolve(command: str):
    """The command's module exists and its config resolves."""
    module, _, _ = parse_entrypoint(command)
    assert importlib.util.find_spec(module) is not None, f"entrypoint module {module} does not exist"
    return _load(command)


def test_rayjob_entrypoint_resolves():
    config = _resolve(_rayjob()["spec"]["entrypoint"])
    assert config.scaling.use_gpu is True, "the RTX 4090 run must train on GPUs"


def test_gpu_trainers_fill_the_gpu_group_one_per_pod():
    job = _rayjob()
    config = _resolve(job["spec"]["entrypoint"])
    gpu_group = _groups(job["spec"]["rayClusterSpec"])["gpu-4090"]
    assert group_gpus(gpu_group) == 1, "one RTX 4090 per pod"
    assert config.scaling.num_workers == gpu_group["replicas"], (
        f"scaling.num_workers={config.scaling.num_workers} but gpu-4090 has {gpu_group['replicas']} replicas"
    )
    needed = config.scaling.num_workers * config.scaling.gpus_per_worker
    assert needed <= gpu_group["replicas"] * group_gpus(gpu_group)
    assert config.scaling.cpus_per_worker <= group_cpus(gpu_group), "a trainer's CPUs must fit its pod"


def test_reward_pool_fits_the_cpu_group():
    job = _rayjob()
    config = _resolve(job["spec"]["entrypoint"])
    cpu_group = _groups(job["spec"]["rayClusterSpec"])["cpu-reward"]
    assert group_gpus(cpu_group) == 0, "reward pods need no GPU"
    needed = config.pool.num_workers * config.pool.cpus_per_worker
    available = cpu_group["replicas"] * group_cpus(cpu_group)
    assert needed <= available, f"reward pool needs {needed} CPUs, cpu-reward gives {available}"


def _offered(spec, resources: dict[str, float]) -> dict[str, float]:
    """Group name -> how many workers asking for `resources` each of its pods can hold (0: none)."""
    out = {}
    for name, group in node_groups(spec):
        offer = group_resources(group)
        out[name] = min((offer.get(k, 0.0) // v for k, v in resources.items()), default=0.0)
    return out


@pytest.mark.parametrize("spec_of", ["RayJob", "RayCluster"])
def test_reward_workers_can_run_only_on_the_cpu_group_and_trainers_only_on_gpus(spec_of):
    """The entrypoint's custom resources keep each kind of worker on its own pods."""
    config = _resolve(_rayjob()["spec"]["entrypoint"])
    (doc,) = documents_of_kind(spec_of)
    spec = doc["spec"]["rayClusterSpec"] if spec_of == "RayJob" else doc["spec"]
    assert config.pool.resources and config.scaling.resources_per_worker, "the run must ask for them"
    groups = _groups(spec)
    rewards = _offered(spec, config.pool.resources)
    assert {name for name, n in rewards.items() if n} == {"cpu-reward"}, rewards
    assert rewards["cpu-reward"] * groups["cpu-reward"]["replicas"] >= config.pool.num_workers
    trainers = _offered(spec, config.scaling.resources_per_worker)
    assert {name for name, n in trainers.items() if n} == {"gpu-4090"}, trainers
    assert trainers["gpu-4090"] * groups["gpu-4090"]["replicas"] >= config.scaling.num_workers


def test_launcher_gpu_boxes_offer_the_trainer_resource():
    (launcher,) = load_documents(CLUSTER_YAML)
    (command,) = [c for c in launcher["worker_start_ray_commands"] if "ray start" in c]
    found = re.search(r"--resources='([^']*)'", command)
    assert found, command
    assert json.loads(found.group(1)) == {"trainer_node": 1}


def test_head_takes_no_training_or_reward_work():
    head = _groups(_rayjob()["spec"]["rayClusterSpec"])["head"]
    assert group_cpus(head) == 0
    assert "nvidia.com/gpu" not in ray_container(head)["resources"].get("limits", {})


def test_storage_path_is_on_the_claim_every_ray_pod_mounts():
    """Multi-node Ray Train: every worker writes checkpoints where the driver can read them back."""
    job = _rayjob()
    config = _resolve(job["spec"]["entrypoint"])
    storage = str(config.run.storage_path)
    for name, group in node_groups(job["spec"]["rayClusterSpec"]):
        mounts = mount_paths(group["template"], SHARED_CLAIM)
        assert len(mounts) == 1, f"{name}: mounts {SHARED_CLAIM} at {sorted(mounts)}"
        (mount,) = mounts
        assert storage.startswith(mount.rstrip("/") + "/"), f"{name}: {storage} is not under {mount}"


def test_launcher_cluster_has_a_4090_box_per_gpu_trainer():
    """cluster.yaml starts runs with the preset's own scaling; each worker box holds one RTX 4090."""
    from service.config import load_config

    (launcher,) = load_documents(CLUSTER_YAML)
    config = load_config(preset="gpt2-4090")
    boxes = len(launcher["provider"]["worker_ips"])
    assert config.scaling.num_workers * config.scaling.gpus_per_worker <= boxes


def _readme_train_commands() -> list[str]:
    text = (DEPLOY / "README.md").read_text().replace("\\\n", " ")
    return [m.group(0).strip() for m in re.finditer(r"python -m service\.train[^\n`]*", text)]


def test_readme_train_commands_resolve():
    commands = _readme_train_commands()
    assert commands, "deploy/README.md should show how a run is started"
    for command in commands:
        _resolve(re.sub(r"\s+", " ", command))


@pytest.mark.parametrize("value", ["0", "-1", "lots"])
def test_a_bad_override_in_a_manifest_would_be_caught(value):
    """The resolution above is a real check: a wrong value fails the same way."""
    from service.config import ConfigError

    command = f"python -m service.train --preset gpt2-4090 --set scaling.num_workers={value}"
    with pytest.raises(ConfigError):
        _load(command)


def test_client_gives_runs_the_same_stop_grace_as_the_deploy_files():
    """Runs submitted with `python -m service.client` get the grace period the deploy files set."""
    import yaml

    from service.client.submission import STOP_WAIT_S

    (job,) = documents_of_kind("RayJob")
    deploy_value = yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"]
    assert int(deploy_value) == STOP_WAIT_S


@pytest.mark.parametrize("spec_of", ["RayJob", "RayCluster"])
def test_the_reward_group_autoscales_with_the_token_and_the_gpu_group_keeps_its_size(spec_of):
    (doc,) = documents_of_kind(spec_of)
    spec = doc["spec"]["rayClusterSpec"] if spec_of == "RayJob" else doc["spec"]
    assert spec.get("enableInTreeAutoscaling") is True
    env = {e["name"]: e for e in spec["autoscalerOptions"]["env"]}
    assert env["RAY_AUTH_MODE"]["value"] == "token"
    assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "grpo-ray-auth",
        "key": "auth_token",
    }
    groups = _groups(spec)
    reward, gpu = groups["cpu-reward"], groups["gpu-4090"]
    assert reward["minReplicas"] <= reward["replicas"] < reward["maxReplicas"]
    assert gpu["minReplicas"] == gpu["replicas"] == gpu["maxReplicas"]


def test_the_autoscaled_pool_fits_the_reward_group_from_its_start_to_its_most():
    job = _rayjob()
    config = _resolve(job["spec"]["entrypoint"])
    autoscale = config.pool.autoscale
    assert autoscale is not None, "the RayJob's run sizes its pool"
    spec = job["spec"]["rayClusterSpec"]
    group = _groups(spec)["cpu-reward"]
    per_pod = min(
        _offered(spec, config.pool.resources)["cpu-reward"], group_cpus(group) // config.pool.cpus_per_worker
    )
    assert config.pool.num_workers <= per_pod * group["replicas"], "the starting pool fits the first pods"
    assert autoscale.max_workers <= per_pod * group["maxReplicas"], "the largest pool fits the most pods"
    assert autoscale.min_workers <= per_pod * group["minReplicas"]
