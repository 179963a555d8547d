"""Readers for the files under deploy/: YAML documents, the Ray pin, pod templates, entrypoints.

Shared by the tests in this folder. Everything here is static: nothing contacts a cluster,
a registry or the network.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBERAY = DEPLOY / "kuberay"
DOCKERFILE = DEPLOY / "Dockerfile"
CONSTRAINTS = DEPLOY / "constraints.txt"
CLUSTER_YAML = DEPLOY / "cluster.yaml"
RUNTIME_ENV_YAML = DEPLOY / "runtime_env.yaml"
DOCKERIGNORE = REPO / ".dockerignore"
PYPROJECT = REPO / "pyproject.toml"

AUTH_SECRET_KEY = "auth_token"  # the key KubeRay's authOptions.secretName expects


def yaml_files() -> list[Path]:
    return sorted(DEPLOY.rglob("*.yaml"))


def load_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document of `path` (multi-document files included)."""
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def kuberay_documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(KUBERAY.glob("*.yaml")) for doc in load_documents(path)]


def documents_of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in kuberay_documents() if doc.get("kind") == kind]


def ray_cluster_specs() -> list[tuple[str, dict[str, Any]]]:
    """(where, RayClusterSpec) for every RayCluster and every RayJob's rayClusterSpec."""
    specs = [(f"RayCluster/{d['metadata']['name']}", d["spec"]) for d in documents_of_kind("RayCluster")]
    specs += [
        (f"RayJob/{d['metadata']['name']}", d["spec"]["rayClusterSpec"]) for d in documents_of_kind("RayJob")
    ]
    return specs


def node_groups(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(group name, group spec) for the head group and each worker group of a RayClusterSpec."""
    yield "head", spec["headGroupSpec"]
    for group in spec.get("workerGroupSpecs", []):
        yield group["groupName"], group


def pod_templates() -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, pod template) for every pod the manifests create: Ray nodes and RayJob submitters."""
    for where, spec in ray_cluster_specs():
        for group_name, group in node_groups(spec):
            yield f"{where}/{group_name}", group["template"]
    for job in documents_of_kind("RayJob"):
        template = job["spec"].get("submitterPodTemplate")
        if template is not None:
            yield f"RayJob/{job['metadata']['name']}/submitter", template


def containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    pod = template["spec"]
    return list(pod.get("containers", [])) + list(pod.get("initContainers", []))


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The container's env entries by name."""
    return {entry["name"]: entry for entry in container.get("env", [])}


def quantity(value: str | int | float) -> float:
    """A Kubernetes CPU or count quantity as a number: '8' -> 8, '500m' -> 0.5."""
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def group_cpus(group: dict[str, Any]) -> float:
    """Logical CPUs one pod of the group gives Ray: rayStartParams num-cpus, else the CPU limit."""
    params = group.get("rayStartParams") or {}
    if "num-cpus" in params:
        return float(params["num-cpus"])
    return quantity(ray_container(group)["resources"]["limits"]["cpu"])


def group_resources(group: dict[str, Any]) -> dict[str, float]:
    """Custom resources one pod of the group offers: rayStartParams `resources`, which KubeRay
    passes to `ray start --resources` as a quoted JSON string ('"{\\"name\\": 1}"')."""
    raw = (group.get("rayStartParams") or {}).get("resources")
    if raw is None:
        return {}
    return {name: float(amount) for name, amount in json.loads(json.loads(raw)).items()}


def group_gpus(group: dict[str, Any]) -> int:
    """GPUs one pod of the group gets: the container's nvidia.com/gpu limit (what KubeRay passes to Ray)."""
    limits = ray_container(group).get("resources", {}).get("limits", {})
    return int(quantity(limits.get("nvidia.com/gpu", 0)))


def ray_container(group: dict[str, Any]) -> dict[str, Any]:
    """The Ray container of a group: KubeRay runs Ray in the first container."""
    return group["template"]["spec"]["containers"][0]


def read_pin() -> str:
    """The exact Ray version of deployments, from deploy/constraints.txt (`ray==X.Y.Z`)."""
    pins = [
        line.split("#", 1)[0].strip()
        for line in CONSTRAINTS.read_text().splitlines()
        if line.split("#", 1)[0].strip()
    ]
    ray_pins = [p for p in pins if re.match(r"^ray(\[.*\])?\s*==", p)]
    assert len(ray_pins) == 1, f"deploy/constraints.txt must pin ray exactly once, found {ray_pins}"
    return ray_pins[0].split("==", 1)[1].strip()


def pyproject_ray_specifier() -> str:
    """The version specifier of the `ray[...]` dependency in pyproject.toml, e.g. '>=2.58,<3'."""
    import tomllib

    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    matches = [re.match(r"^ray(\[[^\]]*\])?\s*(.*)$", dep.strip()) for dep in deps]
    specs = [m.group(2).strip() for m in matches if m]
    assert len(specs) == 1, f"pyproject.toml must list ray exactly once, found {specs}"
    return specs[0]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile with line continuations joined."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            instruction, _, args = stripped.partition(" ")
            result.append((instruction.upper(), args.strip()))
    return result


def dockerfile_base_image() -> str:
    froms = [args.split()[0] for instruction, args in dockerfile_instructions() if instruction == "FROM"]
    assert len(froms) == 1, f"deploy/Dockerfile must have exactly one FROM, found {froms}"
    return froms[0]


def parse_entrypoint(command: str) -> tuple[str, str | None, list[str]]:
    """(module, preset, --set overrides) of `python -m MODULE [--preset P] [--set k=v ...] ...`."""
    argv = shlex.split(command)
    assert argv[:2] == ["python", "-m"], f"entrypoint must start with 'python -m': {command!r}"
    module, rest = argv[2], argv[3:]
    preset, overrides = None, []
    for flag, value in zip(rest, rest[1:], strict=False):
        if flag == "--preset":
            preset = value
        elif flag == "--set":
            overrides.append(value)
    return module, preset, overrides


def mount_paths(template: dict[str, Any], claim: str) -> set[str]:
    """Where the Ray container of a pod template mounts PersistentVolumeClaim `claim`."""
    volumes = {
        v["name"]
        for v in template["spec"].get("volumes", [])
        if v.get("persistentVolumeClaim", {}).get("claimName") == claim
    }
    mounts = template["spec"]["containers"][0].get("volumeMounts", [])
    return {m["mountPath"] for m in mounts if m["name"] in volumes}


def dockerignore_patterns() -> list[str]:
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _docker_pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore glob (`*`, `?`, `**`) as a regex over '/'-separated paths."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignore_excludes(path: str, patterns: list[str] | None = None) -> bool:
    """Whether Docker leaves `path` (relative to the build context) out of the context.

    Docker's rule: the last pattern that matches the path or one of its parent folders decides;
    a leading '!' re-includes.
    """
    patterns = dockerignore_patterns() if patterns is None else patterns
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for raw in patterns:
        negated = raw.startswith("!")
        regex = _docker_pattern_regex(raw.lstrip("!").strip("/"))
        if any(regex.match(candidate) for candidate in candidates):
            excluded = not negated
    return excluded
