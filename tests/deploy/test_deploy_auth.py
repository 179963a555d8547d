"""Token auth on every Ray process: each pod (head, every worker group, the RayJob submitter) and each `ray start`."""

from __future__ import annotations

import shlex

from deploy_files import (
    AUTH_SECRET_KEY,
    CLUSTER_YAML,
    containers,
    documents_of_kind,
    env_of,
    load_documents,
    pod_templates,
    ray_cluster_specs,
)


def _secret_name() -> str:
    (secret,) = documents_of_kind("Secret")
    return secret["metadata"]["name"]


def test_every_ray_cluster_turns_token_auth_on_with_the_secret():
    """authOptions lets the KubeRay operator itself authenticate to the dashboard (RayJob status polls)."""
    for where, spec in ray_cluster_specs():
        options = spec.get("authOptions", {})
        assert options.get("mode") == "token", f"{where}: authOptions.mode must be 'token'"
        assert options.get("secretName") == _secret_name(), f"{where}: authOptions.secretName"


def test_every_pod_has_auth_mode_token():
    templates = list(pod_templates())
    where_list = [where for where, _ in templates]
    assert any(w.endswith("/head") for w in where_list) and any(w.endswith("/submitter") for w in where_list)
    for where, template in templates:
        for container in containers(template):
            mode = env_of(container).get("RAY_AUTH_MODE")
            assert mode is not None and mode.get("value") == "token", f"{where}/{container['name']}"


def test_every_pod_reads_the_token_from_the_secret():
    for where, template in pod_templates():
        for container in containers(template):
            entry = env_of(container).get("RAY_AUTH_TOKEN")
            assert entry is not None, f"{where}/{container['name']}: no RAY_AUTH_TOKEN"
            assert "value" not in entry, f"{where}/{container['name']}: a literal token"
            ref = entry["valueFrom"]["secretKeyRef"]
            assert ref == {"name": _secret_name(), "key": AUTH_SECRET_KEY}, (
                f"{where}/{container['name']}: {ref}"
            )


def test_example_secret_has_the_key_the_pods_read():
    (secret,) = documents_of_kind("Secret")
    assert set(secret["stringData"]) == {AUTH_SECRET_KEY}


def _start_commands(config: dict) -> list[tuple[str, str]]:
    commands = [("head", c) for c in config["head_start_ray_commands"]]
    commands += [("worker", c) for c in config["worker_start_ray_commands"]]
    return [(role, c) for role, c in commands if "ray start" in c]


def _leading_env(command: str) -> dict[str, str]:
    """VAR=value words in front of `ray start`."""
    env = {}
    for word in shlex.split(command):
        if word == "ray":
            break
        name, sep, value = word.partition("=")
        if sep:
            env[name] = value
    return env


def test_every_ray_start_in_the_launcher_file_enables_token_auth():
    (config,) = load_documents(CLUSTER_YAML)
    starts = _start_commands(config)
    assert {role for role, _ in starts} == {"head", "worker"}
    for role, command in starts:
        env = _leading_env(command)
        assert env.get("RAY_AUTH_MODE") == "token", f"{role}: {command}"
        assert env.get("RAY_AUTH_TOKEN_PATH"), f"{role}: the token file is not named"
        assert "RAY_AUTH_TOKEN" not in env, f"{role}: a literal token on the command line"


def test_launcher_token_file_is_copied_from_outside_the_repository():
    """The token path every `ray start` reads is a file_mounts target; its source is the operator's ~/.ray."""
    (config,) = load_documents(CLUSTER_YAML)
    mounts = config["file_mounts"]
    for role, command in _start_commands(config):
        token_path = _leading_env(command)["RAY_AUTH_TOKEN_PATH"]
        assert token_path in mounts, f"{role}: {token_path} is not copied to the nodes"
        source = mounts[token_path]
        assert source.startswith("~/"), (
            f"{source}: the token must come from the operator's home, not the repo"
        )


def test_launcher_containers_run_with_auth_for_every_process():
    """Container-level env also covers drivers and `ray exec` shells, not just `ray start`."""
    (config,) = load_documents(CLUSTER_YAML)
    options = " ".join(config["docker"]["run_options"])
    assert "--env RAY_AUTH_MODE=token" in options
    assert "--env RAY_AUTH_TOKEN_PATH=" in options
    assert "RAY_AUTH_TOKEN=" not in options.replace("RAY_AUTH_TOKEN_PATH=", "")
