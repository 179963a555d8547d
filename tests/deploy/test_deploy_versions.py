"""One Ray version everywhere: the pin, pyproject's range, the base image, the manifests, the launcher file."""

from __future__ import annotations

import re

from deploy_files import (
    CLUSTER_YAML,
    containers,
    dockerfile_base_image,
    load_documents,
    pod_templates,
    pyproject_ray_specifier,
    ray_cluster_specs,
    read_pin,
)
from packaging.specifiers import SpecifierSet
from packaging.version import Version

# rayproject/ray:{ray version}-py{python without dot}-cu{CUDA major}{minor}, Ray's own tag scheme.
OFFICIAL_RAY_IMAGE = re.compile(r"^rayproject/ray:(?P<ray>\d+\.\d+\.\d+)-py(?P<py>\d+)-cu(?P<cuda>\d+)$")


def test_pin_is_an_exact_release_inside_pyproject_range():
    pin = Version(read_pin())
    assert not pin.is_prerelease and not pin.is_devrelease
    specifier = SpecifierSet(pyproject_ray_specifier())
    assert pin in specifier, f"ray {pin} is outside pyproject's ray{specifier}"


def test_dockerfile_builds_on_the_official_ray_image_of_the_pin():
    image = dockerfile_base_image()
    match = OFFICIAL_RAY_IMAGE.match(image)
    assert match, f"FROM {image}: expected rayproject/ray:<ray>-py311-cu<NNN>"
    assert match["ray"] == read_pin(), f"FROM {image} does not carry the pinned Ray {read_pin()}"
    assert match["py"] == "311", "the project targets Python 3.11"
    # RTX 4090 (Ada, sm_89) needs CUDA 11.8 or newer; the project's torch wheels are CUDA 12 builds.
    assert int(match["cuda"][:2]) >= 12, f"{image} carries CUDA {match['cuda']}; want CUDA 12+"


def test_dockerfile_base_image_version_satisfies_pyproject():
    version = OFFICIAL_RAY_IMAGE.match(dockerfile_base_image())["ray"]
    assert Version(version) in SpecifierSet(pyproject_ray_specifier())


def test_every_ray_cluster_declares_the_pinned_ray_version():
    """KubeRay uses rayVersion to pick features (token auth needs 2.52+); it must match the image."""
    for where, spec in ray_cluster_specs():
        assert spec["rayVersion"] == read_pin(), f"{where}: rayVersion {spec['rayVersion']}"


def _image_tag_ray_version(image: str) -> str | None:
    match = re.search(r":.*\bray(\d+\.\d+\.\d+)\b", image)
    return match.group(1) if match else None


def test_every_pod_runs_the_project_image_built_on_the_pin():
    pin = read_pin()
    images = {c["image"] for _, template in pod_templates() for c in containers(template)}
    assert len(images) == 1, f"every pod should run the same image, found {sorted(images)}"
    (image,) = images
    assert _image_tag_ray_version(image) == pin, f"{image}: the tag should say ray{pin}"


def test_cluster_launcher_runs_the_same_image():
    (config,) = load_documents(CLUSTER_YAML)
    manifests_image = next(c["image"] for _, t in pod_templates() for c in containers(t))
    assert config["docker"]["image"] == manifests_image
    assert "head_image" not in config["docker"] and "worker_image" not in config["docker"]
