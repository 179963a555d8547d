"""Run identity and the run directory: the id, where the directory is, fresh start or resume.

The run id is `run.name`, or `grpo-<UTC date-time>-<6 hex>` when none is given. The directory is
`run.run_dir`, or `<run.storage_path or runs>/<run id>`; it is made absolute once, here, so that
Ray Train workers (which change their working directory) and a later `--resume` from elsewhere
find the same place.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from service.config import (
    ConfigError,
    ServiceConfig,
    check_key,
    config_to_yaml,
    load_config,
    parse_override,
    trainer_config,
    validate_config,
)
from service.config_sources import deep_merge, read_config_file, set_dotted
from service.presets import DEFAULT_PRESET
from service.run_files import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    EVAL_FILE,
    METRICS_FILE,
    REPORT_FILE,
    ROLLOUTS_FILE,
    RUNTIME_FILE,
    SUMMARY_FILE,
    write_text_atomic,
)
from service.run_lock import LOCK_FILE, RunDirBusy, RunLock, check_free, claim_run_dir
from trainer.schedule import Schedule

DEFAULT_RUNS_ROOT = "runs"
RESUME_LIVE_ADVICE = "it can be resumed once that run has ended (stop it first to resume it now)"
FRESH_LIVE_ADVICE = "choose another --run-dir / run.name, or wait for that run to end"
WRITE_CHECK_PREFIX = ".write-check-"
TINY_MODEL_DIR = "tiny_model"  # model.source=hf without model.path: a tiny random model is made here


def new_run_id(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    return f"grpo-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def default_run_dir(cfg: ServiceConfig, run_id: str) -> Path:
    return Path(cfg.run.storage_path or DEFAULT_RUNS_ROOT) / run_id


def resolve_run(cfg: ServiceConfig, run_dir: str | None = None) -> ServiceConfig:
    """The config with run.name and an absolute run.run_dir filled in (validated again)."""
    run_id = cfg.run.name or new_run_id()
    directory = Path(run_dir or cfg.run.run_dir or default_run_dir(cfg, run_id)).expanduser().resolve()
    resolved: dict = {"run": {"name": run_id, "run_dir": str(directory)}}
    if cfg.model.source == "hf" and not cfg.model.path:
        resolved["model"] = {"path": str(directory / TINY_MODEL_DIR)}  # made there before the run starts
    return validate_config(deep_merge(cfg.model_dump(mode="json"), resolved))


def fresh_config(
    preset: str | None,
    config_file: str | None,
    overrides: Sequence[str],
    run_dir: str | None,
    command: str | None = None,
) -> ServiceConfig:
    """A new run's resolved config; its directory must not hold another run that took a step.
    command: the command line, for the refusal to say what resumes that run."""
    cfg = resolve_run(load_config(preset or DEFAULT_PRESET, config_file, overrides), run_dir)
    check_fresh_dir(Path(cfg.run.run_dir), command=command)
    return cfg


def check_fresh_dir(directory: Path, *, held: bool = False, command: str | None = None) -> None:
    """ConfigError unless `directory` is missing, empty (its lock file aside) or holds a run that
    never took a step (its Ray did not start, say: nothing to continue); a run that is live is
    named, and one that has ended is sent to --resume, with the command that does it. `held`:
    this process holds the lock (no other run is live, and looking would only find ourselves)."""
    if not directory.exists() or all(_not_a_record(p.name) for p in directory.iterdir()):
        return
    if not held:
        _refuse_live(directory, "run.run_dir", FRESH_LIVE_ADVICE)
    if never_stepped(directory):
        return
    resume = f"{command} --resume" if command else f"python -m service.train --run-dir {directory} --resume"
    raise ConfigError(
        f"run.run_dir: {str(directory)!r} already holds a run; pass --resume to continue it ({resume}), "
        "or choose another --run-dir / run.name"
    )


# What a run writes besides its config and checkpoints: a fresh start over a run that never took a
# step removes them, so nothing of the attempt before is read as this run's.
ATTEMPT_RECORDS = (
    METRICS_FILE,
    EVAL_FILE,
    ROLLOUTS_FILE,
    SUMMARY_FILE,
    RUNTIME_FILE,
    REPORT_FILE,
    "report.html",
)


def never_stepped(directory: Path) -> bool:
    """Whether the run in `directory` never recorded a step: no row in metrics.jsonl, no checkpoint
    and no summary counting a step (a driver that died before its first step, or was refused)."""
    if any(p.is_dir() for p in (directory / CHECKPOINT_DIR).glob("step_*")):  # `trainer.checkpoint`'s
        return False
    with contextlib.suppress(OSError, ValueError):
        if int(json.loads((directory / SUMMARY_FILE).read_text()).get("steps") or 0) > 0:
            return False
    with contextlib.suppress(OSError):
        if any(line.strip() for line in (directory / METRICS_FILE).read_text().splitlines()):
            return False
    return True


def start_afresh(directory: Path, log: Callable[[str], None]) -> None:
    """Before a fresh start in a directory whose run never took a step (its lock held): remove that
    attempt's records and say so; nothing when the directory holds none."""
    left = [directory / name for name in ATTEMPT_RECORDS if (directory / name).is_file()]
    if not (directory / CONFIG_FILE).is_file() and not left:
        return
    for path in left:
        path.unlink()
    log(f"run.run_dir: {str(directory)!r} held a run that never took a step (no metrics, no checkpoint); "
        "starting afresh there")  # fmt: skip


def _not_a_record(name: str) -> bool:
    """The lock file, and the probe file another driver's preflight makes and removes at once
    (`service.preflight.relations.writable_problem`): neither says a run was here."""
    return name == LOCK_FILE or name.startswith(WRITE_CHECK_PREFIX)


def _refuse_live(directory: Path, key: str, advice: str) -> None:
    try:
        check_free(directory)
    except RunDirBusy as busy:
        raise ConfigError(f"{key}: {str(directory)!r} is {busy}; {advice}") from None


def resumed_config(
    config_file: str | None, overrides: Sequence[str], run_dir: str | None, preset: str | None = None
) -> ServiceConfig:
    """The config of the run to continue: its saved config.yaml, then --config and --set on top.

    The run is found by --run-dir, or by run.run_dir / run.name (with run.storage_path) given in
    the file or the overrides. With `preset` (the command that started the run, and --resume), the
    preset with --config and --set must give that same config (`refuse_another_start`).
    """
    located = _locate(config_file, overrides, run_dir)
    _refuse_live(located, "--resume", RESUME_LIVE_ADVICE)
    saved = located / CONFIG_FILE
    if not saved.is_file():
        raise ConfigError(f"--resume: {str(located)!r} holds no {CONFIG_FILE}; it is not a run directory")
    data = read_config_file(saved)
    if config_file is not None:
        data = deep_merge(data, read_config_file(config_file))
    for override in overrides:
        set_dotted(data, *parse_override(override))
    cfg = validate_config(data)
    name = cfg.run.name or located.name
    data = deep_merge(cfg.model_dump(mode="json"), {"run": {"name": name, "run_dir": str(located)}})
    cfg = validate_config(data)
    if preset is not None:
        refuse_another_start(preset, config_file, overrides, cfg)
    refuse_finished(cfg, located)
    return cfg


def refuse_another_start(
    preset: str, config_file: str | None, overrides: Sequence[str], saved: ServiceConfig
) -> None:
    """`--resume --preset P ...`: accepted when P with the same --config and --set gives the run's
    saved config (the command that started it, with --resume); otherwise ConfigError naming the
    first key where they differ (its identity aside: run.name, the directory, a model made there)."""
    started = load_config(preset, config_file, overrides)
    started = resolve_run(
        started.model_copy(update={"run": started.run.model_copy(update={"name": saved.run.name})}),
        str(saved.run.run_dir),
    )
    difference = first_difference(started.model_dump(mode="json"), saved.model_dump(mode="json"))
    if difference is not None:
        key, given, kept = difference
        raise ConfigError(
            f"--preset {preset}: gives {key}={given!r}, but the run in {str(saved.run.run_dir)!r} was saved "
            f"with {key}={kept!r}; drop --preset to resume it as saved, or --set {key}=... to change it"
        )


def first_difference(a: Any, b: Any, prefix: str = "") -> tuple[str, Any, Any] | None:
    """(dotted key, a's value, b's value) of the first key where two nested dicts differ; None
    when they are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            found = first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
            if found is not None:
                return found
        return None
    return None if a == b else (prefix.rstrip("."), a, b)


def refuse_finished(cfg: ServiceConfig, run_dir: Path) -> None:
    """A run that succeeded and has no more steps to take is left as it is (ConfigError, exit 2)."""
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return  # no summary (killed) or a torn one: resume
    total = Schedule.of(trainer_config(cfg)).total
    if summary.get("status") == "succeeded" and int(summary.get("steps") or 0) >= total:
        raise ConfigError(
            f"--resume: run {cfg.run.name!r} already succeeded at step {summary.get('steps')} of {total}; "
            "nothing to do and nothing was changed (to train longer, add --set grpo.steps=<more>)"
        )


def _locate(config_file: str | None, overrides: Sequence[str], run_dir: str | None) -> Path:
    if run_dir:
        return Path(run_dir).expanduser().resolve()
    run: dict = dict(read_config_file(config_file).get("run") or {}) if config_file else {}
    for override in overrides:
        key, value = parse_override(override)
        if key.startswith("run."):
            check_key(key)
            run[key.removeprefix("run.")] = value
    if run.get("run_dir"):
        return Path(str(run["run_dir"])).expanduser().resolve()
    if run.get("name"):
        return (Path(str(run.get("storage_path") or DEFAULT_RUNS_ROOT)) / str(run["name"])).resolve()
    raise ConfigError("--resume: say which run, with --run-dir DIR or --set run.name=<run id>")


def claim_run(cfg: ServiceConfig, *, resume: bool, log: Callable[[str], None]) -> RunLock:
    """Hold the run directory for this process (`service.run_lock`) before anything is written to
    it, then check again under the lock what `fresh_config` / `resumed_config` checked before it:
    a run may have started or ended meanwhile. ConfigError (nothing left behind) when refused."""
    directory = Path(cfg.run.run_dir)
    key, advice = ("--resume", RESUME_LIVE_ADVICE) if resume else ("run.run_dir", FRESH_LIVE_ADVICE)
    try:
        lock = claim_run_dir(directory, log=log)
    except RunDirBusy as busy:
        raise ConfigError(f"{key}: {str(directory)!r} is {busy}; {advice}") from None
    except OSError as exc:
        raise ConfigError(
            f"run.run_dir: {str(directory)!r} cannot be created ({exc.strerror or exc})"
        ) from None
    try:
        if resume:
            refuse_finished(cfg, directory)
        else:
            check_fresh_dir(directory, held=True)
            start_afresh(directory, log)
    except ConfigError:
        lock.abandon()
        raise
    return lock


RAY_WORKING_DIR_PART = "runtime_resources/working_dir_files"  # where `ray job submit --working-dir` unpacks


def ephemeral_dir_warning(directory: Path) -> str | None:
    """A warning when the run's records would land inside a Ray job's unpacked working directory,
    which Ray deletes with its session (a relative --run-dir or the default runs/ under
    `ray job submit --working-dir .`); None otherwise."""
    if RAY_WORKING_DIR_PART not in directory.resolve().as_posix():
        return None
    return (
        f"the run's records go to {str(directory)!r}, inside the Ray job's working directory, which Ray "
        "deletes with its session; set run.storage_path (or an absolute --run-dir) to a lasting directory"
    )


def prepare_run_dir(cfg: ServiceConfig) -> Path:
    """Create the directory (and checkpoints/) and save the resolved config.yaml; returns the path."""
    directory = Path(cfg.run.run_dir)
    try:
        (directory / CHECKPOINT_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"run.run_dir: {str(directory)!r} cannot be created ({exc.strerror or exc})"
        ) from None
    write_text_atomic(directory / CONFIG_FILE, config_to_yaml(cfg))
    return directory
