"""No secret material in the image or the deploy files; the build context leaves runs, checkpoints and .git out."""

from __future__ import annotations

import re

import pytest
from deploy_files import (
    AUTH_SECRET_KEY,
    DEPLOY,
    REPO,
    containers,
    dockerfile_instructions,
    dockerignore_excludes,
    documents_of_kind,
    env_of,
    pod_templates,
)

SECRET_WORDS = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|PRIVATE_?KEY", re.IGNORECASE)
# Runs of the base64 alphabet long enough to be a credential. Ray's own tokens and
# `openssl rand -hex 32` are 64 hex digits; `openssl rand -base64 32` gives 44 characters that
# may contain '/' and end in '='.
_CANDIDATE = re.compile(r"[A-Za-z0-9+/_=-]{32,}")
# A snake_case name (a Prometheus series such as ray_reward_pool_worker_restarts_total): lowercase
# words joined by '_'; 32 random base64 characters are all but certain to hold a capital or a digit.
_SNAKE_CASE = re.compile(r"^[a-z]+(_[a-z]+)+$")


def token_like(text: str) -> list[str]:
    """Token-looking strings in `text`: 32+ characters without a '/' (hex, urlsafe), or base64 with
    '+' or '=' padding. A path such as /mnt/shared/ray-results/run-name is not one."""
    found = []
    for candidate in _CANDIDATE.findall(text):
        if _SNAKE_CASE.match(candidate):
            continue
        segments = candidate.split("/")
        if max(len(seg) for seg in segments) >= 32 or "+" in candidate or candidate.endswith("="):
            found.append(candidate)
    return found


def _deploy_text_files():
    return [p for p in sorted(DEPLOY.rglob("*")) if p.is_file()] + [REPO / ".dockerignore"]


@pytest.mark.parametrize("path", _deploy_text_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_token_like_strings(path):
    hits = token_like(path.read_text())
    assert not hits, f"{path.relative_to(REPO)} contains token-like strings: {hits}"


def test_token_like_detector_catches_a_generated_token():
    """The check above must be able to fail: a hex token and a base64 token are both caught."""
    assert token_like("value: 3f1c9a0b7e5d4c2b1a09f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a190817263")
    assert token_like("rate(ray_reward_pool_worker_restarts_total[1m])") == []
    assert token_like('auth_token: "q8Zr0V1xk2/m9s7Yt6Wd5Pf4Lg3Hh2Bb1Nn0Cc9Vv8="')
    assert not token_like("--set run.storage_path=/mnt/shared/ray-results/gpt2-4090-chess/")


def test_dockerfile_sets_no_secret_env_or_build_arg():
    for instruction, args in dockerfile_instructions():
        if instruction in {"ENV", "ARG"}:
            assert not SECRET_WORDS.search(args), f"Dockerfile {instruction} {args}"


def test_dockerfile_copies_no_token_or_ray_state():
    for instruction, args in dockerfile_instructions():
        if instruction in {"COPY", "ADD"}:
            assert ".ray" not in args and "auth_token" not in args, f"Dockerfile {instruction} {args}"


def test_no_literal_values_for_secret_env_vars():
    for where, template in pod_templates():
        for container in containers(template):
            for name, entry in env_of(container).items():
                if SECRET_WORDS.search(name) and not name.endswith("_PATH"):
                    assert "value" not in entry, f"{where}/{container['name']}: {name} has a literal value"


def test_example_secret_carries_no_token():
    """Applied as-is it fails closed: Ray refuses to start with token auth and an empty token."""
    (secret,) = documents_of_kind("Secret")
    assert secret["stringData"][AUTH_SECRET_KEY] == ""
    assert "data" not in secret


@pytest.mark.parametrize(
    "path",
    [
        "runs/20260101-abc/metrics.jsonl",
        "runs/x/checkpoints/step_1/model.safetensors",
        "checkpoints/step_1.pt",
        "service/checkpoints/step_1.pt",
        "trainer/runs/debug/config.yaml",
        ".git/HEAD",
        ".git/objects/ab/cdef",
        ".ray/auth_token",
        "service/auth_token",
        ".venv/bin/python",
        "service/__pycache__/train.cpython-311.pyc",
    ],
)
def test_build_context_leaves_out(path):
    assert dockerignore_excludes(path), f"{path} would be sent to the image build"


def _copy_sources() -> list[str]:
    sources = []
    for instruction, args in dockerfile_instructions():
        if instruction == "COPY":
            words = [w for w in args.split() if not w.startswith("--")]
            sources += words[:-1]
    return sources


def test_build_context_keeps_everything_the_dockerfile_copies():
    """A COPY source the .dockerignore leaves out would fail the build."""
    sources = _copy_sources()
    assert {"pyproject.toml", "rewards", "trainer", "actors", "service"} <= set(sources)
    for source in sources:
        probe = f"{source}/__init__.py" if (REPO / source).is_dir() or "." not in source else source
        assert not dockerignore_excludes(probe), f"COPY {source}: left out of the build context"


def test_dockerignore_matcher_follows_docker_rules():
    """Last matching pattern wins, parents count, '!' re-includes: the checks above rely on it."""
    patterns = ["*", "!keep/", "keep/**/drop"]
    assert dockerignore_excludes("other.txt", patterns)
    assert not dockerignore_excludes("keep/a.py", patterns)
    assert dockerignore_excludes("keep/x/drop/b.py", patterns)
    assert dockerignore_excludes("keep/drop", patterns)
