"""Every deploy file parses and has the shape its consumer (kubectl/KubeRay, `ray up`, `ray job submit`) needs."""

from __future__ import annotations

import re

import pytest
import yaml
from deploy_files import (
    CLUSTER_YAML,
    DEPLOY,
    KUBERAY,
    REPO,
    RUNTIME_ENV_YAML,
    documents_of_kind,
    kuberay_documents,
    load_documents,
    ray_cluster_specs,
    yaml_files,
)


def test_deploy_has_the_expected_yaml_files():
    names = {path.relative_to(DEPLOY).as_posix() for path in yaml_files()}
    expected = {
        "cluster.yaml",
        "runtime_env.yaml",
        "kuberay/raycluster.yaml",
        "kuberay/rayjob.yaml",
        "kuberay/secret.example.yaml",
        "kuberay/shared-pvc.yaml",
    }
    assert expected <= names, f"missing: {sorted(expected - names)}"


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_every_yaml_file_parses_to_mappings(path):
    docs = load_documents(path)
    assert docs, f"{path} has no YAML document"
    assert all(isinstance(doc, dict) for doc in docs), f"{path}: every document must be a mapping"


def test_kubernetes_documents_name_their_kind():
    for doc in kuberay_documents():
        assert doc.get("apiVersion") and doc.get("kind"), f"document without apiVersion/kind: {doc}"
        assert doc.get("metadata", {}).get("name"), f"{doc['kind']} without metadata.name"


def test_kuberay_resources_use_the_stable_api():
    ray_docs = [d for d in kuberay_documents() if d["kind"] in ("RayCluster", "RayJob")]
    assert {d["kind"] for d in ray_docs} == {"RayCluster", "RayJob"}
    assert all(d["apiVersion"] == "ray.io/v1" for d in ray_docs)


def test_each_ray_cluster_has_a_head_a_gpu_group_and_a_cpu_group():
    for where, spec in ray_cluster_specs():
        assert "headGroupSpec" in spec, where
        groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
        assert set(groups) == {"gpu-4090", "cpu-reward"}, f"{where}: worker groups {sorted(groups)}"
        for name, group in groups.items():
            replicas = group["replicas"]
            assert group["minReplicas"] <= replicas <= group["maxReplicas"], f"{where}/{name}"
            assert all(isinstance(v, str) for v in group["rayStartParams"].values()), (
                f"{where}/{name}: KubeRay wants rayStartParams values as strings"
            )


def test_raycluster_and_rayjob_describe_the_same_cluster():
    """The RayJob's cluster is the long-lived RayCluster's spec: one shape to reason about."""
    (cluster,) = documents_of_kind("RayCluster")
    (job,) = documents_of_kind("RayJob")
    assert job["spec"]["rayClusterSpec"] == cluster["spec"]


def test_rayjob_submits_through_a_submitter_job_and_cleans_up():
    (job,) = documents_of_kind("RayJob")
    spec = job["spec"]
    assert spec["submissionMode"] == "K8sJobMode"
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["entrypoint"].startswith("python -m service.train ")
    assert isinstance(yaml.safe_load(spec["runtimeEnvYAML"]), dict)


def test_shared_claim_is_read_write_many():
    (claim,) = documents_of_kind("PersistentVolumeClaim")
    assert "ReadWriteMany" in claim["spec"]["accessModes"], "pods on several nodes mount it at once"


def test_cluster_yaml_is_accepted_by_the_ray_cluster_launcher():
    """Ray's own launcher code fills defaults and validates the file against its schema (no SSH)."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    (config,) = load_documents(CLUSTER_YAML)
    assert config["provider"]["type"] == "local"
    prepared = prepare_config(config)
    validate_config(prepared)
    node_type = prepared["available_node_types"][prepared["head_node_type"]]
    assert node_type["min_workers"] == node_type["max_workers"] == len(config["provider"]["worker_ips"])


def test_cluster_yaml_addresses_are_documentation_placeholders():
    """192.0.2.0/24 (TEST-NET-1) is never routed: the file cannot point at someone's machines."""
    (config,) = load_documents(CLUSTER_YAML)
    provider = config["provider"]
    for ip in [provider["head_ip"], *provider["worker_ips"]]:
        assert ip.startswith("192.0.2."), f"{ip} is not a documentation address"


def test_runtime_env_is_a_valid_ray_runtime_env():
    from ray.runtime_env import RuntimeEnv

    (runtime_env,) = load_documents(RUNTIME_ENV_YAML)
    RuntimeEnv(**runtime_env)  # raises on unknown or malformed fields
    assert runtime_env["working_dir"] == "."


@pytest.mark.parametrize(
    "path",
    [
        "runs/20260101-abc/metrics.jsonl",
        "runs/x/checkpoints/step_100/model.safetensors",
        "checkpoints/step_1.pt",
        "service/checkpoints/last.pt",
        ".git/HEAD",
        ".git/objects/ab/cdef",
    ],
)
def test_runtime_env_upload_leaves_out_runs_checkpoints_and_git(path):
    """Checked with the matcher Ray itself applies to `excludes` when it packs the working dir."""
    from ray._private.runtime_env.packaging import _get_excludes

    (runtime_env,) = load_documents(RUNTIME_ENV_YAML)
    assert _get_excludes(REPO, runtime_env["excludes"])(REPO / path), f"{path} would be uploaded"


@pytest.mark.parametrize("path", ["service/train.py", "trainer/policy/gpt.py", "pyproject.toml"])
def test_runtime_env_upload_keeps_the_code(path):
    from ray._private.runtime_env.packaging import _get_excludes

    (runtime_env,) = load_documents(RUNTIME_ENV_YAML)
    assert not _get_excludes(REPO, runtime_env["excludes"])(REPO / path)


def test_readme_mentions_only_deploy_files_that_exist():
    readme = (DEPLOY / "README.md").read_text()
    mentioned = set(re.findall(r"\bdeploy/[\w./-]+\.(?:ya?ml|txt|md)\b|\bdeploy/Dockerfile\b", readme))
    assert mentioned, "deploy/README.md should point at the files it explains"
    missing = sorted(p for p in mentioned if not (REPO / p).exists())
    assert not missing, f"deploy/README.md mentions missing files: {missing}"
    for manifest in sorted(KUBERAY.glob("*.yaml")):
        assert f"deploy/kuberay/{manifest.name}" in readme, f"README never explains {manifest.name}"


def _stop_wait_settings() -> dict[str, str]:
    """Every place that sets RAY_JOB_STOP_WAIT_TIME_S, by where."""
    found = {}
    (job,) = documents_of_kind("RayJob")
    found["RayJob runtimeEnvYAML"] = yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"][
        "RAY_JOB_STOP_WAIT_TIME_S"
    ]
    (runtime_env,) = load_documents(RUNTIME_ENV_YAML)
    found["runtime_env.yaml"] = runtime_env["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"]
    for where, spec in ray_cluster_specs():
        head_env = {e["name"]: e for e in spec["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]}
        found[f"{where} head env"] = head_env["RAY_JOB_STOP_WAIT_TIME_S"]["value"]
    (launcher,) = load_documents(CLUSTER_YAML)
    options = " ".join(launcher["docker"]["run_options"])
    found["cluster.yaml docker env"] = re.search(r"RAY_JOB_STOP_WAIT_TIME_S=(\S+)", options).group(1)
    return found


def test_job_stop_leaves_time_for_a_checkpoint_everywhere():
    """Ray's default is 3 s before SIGKILL; a 124M-parameter checkpoint to shared storage needs more."""
    settings = _stop_wait_settings()
    assert len(set(settings.values())) == 1, f"different stop wait times: {settings}"
    for where, value in settings.items():
        assert isinstance(value, str) and value.isdigit(), f"{where}: Ray parses it with int(): {value!r}"
        assert int(value) >= 60, f"{where}: {value} s is too short for a checkpoint"
