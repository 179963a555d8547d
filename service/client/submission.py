"""What a submission sends: the entrypoint command, its runtime env and its metadata tag.

Pure functions (no Ray, no network), so every rule here is tested without a cluster. The run's
config is resolved here too, with the same code the driver will run, so a bad preset, key or
value is refused at once, in one line, instead of as a FAILED run minutes later.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.client.checks import modules_to_ship, preflight_here
from service.config import RUN_ID_PATTERN, ServiceConfig, load_config, parse_override
from service.presets import DEFAULT_PRESET, PRESETS

SERVICE_TAG = "grpo-service"  # metadata["service"] of every run this client submits
RUN_NAME_KEY = "run.name"  # the config key through which the driver learns its run id
TRAIN_MODULE = "service.train"
STOP_WAIT_S = 60  # SIGTERM -> SIGKILL grace for `stop()`: the driver finishes a step and checkpoints

# Never uploaded with the working dir: run outputs, weights, caches, git history, secrets.
UPLOAD_EXCLUDES = (
    "runs/",
    "**/runs/",
    "checkpoints/",
    "**/checkpoints/",
    ".git/",
    ".venv/",
    "bench-out/",
    "**/__pycache__/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".hypothesis/",
    "*.pt",
    "*.safetensors",
    "**/auth_token",
)

_RUN_ID = re.compile(RUN_ID_PATTERN)


@dataclass(frozen=True)
class Submission:
    """Everything `JobSubmissionClient.submit_job` needs, built and checked before any request."""

    run_id: str
    entrypoint: str
    runtime_env: dict[str, Any]
    metadata: dict[str, str]


def new_run_id(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    return f"grpo-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise ValueError(
            f"run_id {run_id!r} is not allowed: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (it names the run's directory and its Ray job)"
        )
    return run_id


def check_overrides(overrides: Sequence[str]) -> list[str]:
    """Each `dotted.key=value` must name a config key (ValueError naming it otherwise)."""
    if isinstance(overrides, str):
        raise ValueError("overrides must be a sequence of 'dotted.key=value' strings, not one string")
    checked = [str(item) for item in overrides]
    for item in checked:
        key, _ = parse_override(item)
        if key == RUN_NAME_KEY:
            raise ValueError(
                f"override {item!r} is not allowed: the run id sets {RUN_NAME_KEY}; pass run_id instead"
            )
    return checked


def check_entrypoint_resources(*, num_cpus: float | None, num_gpus: float | None) -> None:
    """What the driver process reserves; None leaves Ray's default (0)."""
    for name, amount in (("entrypoint_num_cpus", num_cpus), ("entrypoint_num_gpus", num_gpus)):
        if amount is not None and not (isinstance(amount, int | float) and amount >= 0):
            raise ValueError(f"{name} must be a number >= 0, got {amount!r}")


def check_config(preset: str | None, local_config: Path | None, overrides: Sequence[str]) -> ServiceConfig:
    """Resolve the run's config as the driver will, so a bad one fails here (ConfigError, a ValueError)."""
    if preset is not None and preset not in PRESETS:
        allowed = ", ".join(repr(name) for name in PRESETS)
        raise ValueError(f"preset {preset!r} is not allowed; expected one of {allowed}")
    return load_config(
        preset or DEFAULT_PRESET,
        config_file=str(local_config) if local_config is not None else None,
        overrides=overrides,
    )


def _config_paths(config_file: str | os.PathLike, working_dir: Path | None) -> tuple[Path | None, str]:
    """(the file here, or None when it is only on the cluster; its path as the driver sees it)."""
    path = Path(config_file)
    if working_dir is None:
        return None, str(path)  # no upload: the path names a file on the cluster
    local = (path if path.is_absolute() else Path.cwd() / path).resolve()
    if not local.is_file():
        raise ValueError(f"config_file {str(config_file)!r} does not exist or is not a file")
    try:
        return local, local.relative_to(working_dir).as_posix()
    except ValueError:
        raise ValueError(
            f"config_file {str(config_file)!r} is outside working_dir {str(working_dir)!r}: "
            "only the working dir is uploaded, so the file must be inside it"
        ) from None


def entrypoint_command(
    *,
    run_id: str,
    preset: str | None,
    config_path: str | None,
    overrides: Sequence[str],
    run_dir: str | None,
) -> str:
    argv = ["python", "-m", TRAIN_MODULE]
    if preset is not None:
        argv += ["--preset", preset]
    if config_path is not None:
        argv += ["--config", config_path]
    for item in [*overrides, f"{RUN_NAME_KEY}={run_id}"]:
        argv += ["--set", item]
    if run_dir is not None:
        argv += ["--run-dir", str(run_dir)]
    return shlex.join(argv)


def _working_dir(working_dir: str | os.PathLike | None) -> Path | None:
    if working_dir is None:
        return None
    path = Path(working_dir).expanduser().resolve()
    if not (path / "service" / "train.py").is_file():
        raise ValueError(
            f"working_dir {str(working_dir)!r} has no service/train.py: submit from the repository root, "
            "or pass working_dir=None when the cluster's image already holds the code"
        )
    return path


def runtime_env(
    working_dir: Path | None, env_vars: Mapping[str, str] | None, py_modules: Sequence[str] = ()
) -> dict[str, Any]:
    env = {"RAY_JOB_STOP_WAIT_TIME_S": str(STOP_WAIT_S), "PYTHONUNBUFFERED": "1"}
    for key, value in (env_vars or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"env_vars must map str to str; got {key!r}: {value!r}")
        env[key] = value
    out: dict[str, Any] = {"env_vars": env}
    if working_dir is not None:
        out |= {"working_dir": str(working_dir), "excludes": list(UPLOAD_EXCLUDES)}
    if py_modules:
        out["py_modules"] = list(py_modules)
    return out


def build_submission(
    *,
    run_id: str | None,
    preset: str | None,
    config_file: str | os.PathLike | None,
    overrides: Sequence[str],
    run_dir: str | os.PathLike | None,
    working_dir: str | os.PathLike | None,
    env_vars: Mapping[str, str] | None,
) -> Submission:
    run_id = check_run_id(run_id) if run_id is not None else new_run_id()
    upload = _working_dir(working_dir)
    local_config, config_path = (
        _config_paths(config_file, upload) if config_file is not None else (None, None)
    )
    checked = check_overrides(overrides)
    py_modules: list[str] = []
    if config_file is None or local_config is not None:
        cfg = check_config(preset, local_config, [*checked, f"{RUN_NAME_KEY}={run_id}"])
        preflight_here(cfg, upload)
        py_modules = modules_to_ship(cfg, upload)
    entrypoint = entrypoint_command(
        run_id=run_id,
        preset=preset,
        config_path=config_path,
        overrides=checked,
        run_dir=str(run_dir) if run_dir is not None else None,
    )
    metadata = {"service": SERVICE_TAG, "run_id": run_id, "preset": preset or DEFAULT_PRESET}
    if config_path is not None:
        metadata["config_file"] = config_path
    return Submission(run_id, entrypoint, runtime_env(upload, env_vars, py_modules), metadata)


def resume_submission(
    *,
    run_id: str,
    job_id: str,
    overrides: Sequence[str],
    config_file: str | os.PathLike | None,
    run_dir: str | os.PathLike | None,
    working_dir: str | os.PathLike | None,
    env_vars: Mapping[str, str] | None,
) -> Submission:
    """A job continuing run `run_id` from its latest checkpoint: `python -m service.train --resume`
    with the run's name (or `run_dir`), under a job id of its own (`job_id`). The run's saved
    config is on the cluster, so only the overrides are checked here; the driver checks the rest."""
    check_run_id(run_id)
    upload = _working_dir(working_dir)
    config_path = _config_paths(config_file, upload)[1] if config_file is not None else None
    checked = check_overrides(overrides)
    argv = shlex.split(
        entrypoint_command(run_id=run_id, preset=None, config_path=config_path, overrides=checked,
                           run_dir=str(run_dir) if run_dir is not None else None)
    )  # fmt: skip
    argv.insert(3, "--resume")  # after `python -m service.train`
    metadata = {"service": SERVICE_TAG, "run_id": job_id, "resumes": run_id, "preset": "resume"}
    return Submission(job_id, shlex.join(argv), runtime_env(upload, env_vars), metadata)
