"""What the driver calls `fit()` on, by `run.backend`: Ray Train's TorchTrainer (`ray_train`), or the
one rank's loop in the driver process (`local`), and what a resume must check.

The driver runs `fit()` of what `build_run` gives in a background thread. A `LocalRun`'s loop talks
to a `LocalContext` (world 1, the checkpoints copied into the same `<checkpoint root>/step_<N>`
layout Ray Train writes). The control actor, the reward pool, the records and the console are the
same for both.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.run.context import LocalContext, local_device
from actors.run.loop import LocalRun, LoopSpec
from service.config import ConfigError, ServiceConfig
from service.console import Console
from service.run_files import CHECKPOINT_DIR
from trainer.checkpoint import list_checkpoints

RAY_TRAIN_MARKER = ".validate_storage_marker"  # Ray Train writes it in the root when a run starts


def checkpoint_root(cfg: ServiceConfig) -> Path:
    """Where Ray Train keeps the checkpoints: <storage_path>/<run id>/checkpoints, else <run dir>/checkpoints."""
    if cfg.run.storage_path:
        return Path(cfg.run.storage_path).expanduser().resolve() / str(cfg.run.name) / CHECKPOINT_DIR
    return Path(str(cfg.run.run_dir)) / CHECKPOINT_DIR


def build_run(
    cfg: ServiceConfig,
    spec: LoopSpec,
    control: Any,
    console: Console,
    worker_env: dict[str, str] | None = None,
) -> Any:
    """What the run's thread calls `fit()` on: Ray Train's TorchTrainer, or with `run.backend: local`
    the loop in this process (`local_run`: no Ray Train controller or worker actors).
    worker_env: variables for the trainer workers' runtime_env (OpenMP's, on a cluster joined)."""
    root = checkpoint_root(cfg)
    if cfg.run.backend == "local":
        return local_run(cfg, spec, control, console, root)
    if problem := local_checkpoints_problem(root):
        raise ConfigError(problem)
    return build_trainer(cfg, spec, control, worker_env)


def build_trainer(cfg: ServiceConfig, spec: LoopSpec, control: Any, worker_env: dict[str, str] | None = None):
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from actors.run.ray_context import train_loop_per_worker

    resources = {"CPU": cfg.scaling.cpus_per_worker, **cfg.scaling.resources_per_worker}
    if cfg.scaling.use_gpu:
        resources["GPU"] = cfg.scaling.gpus_per_worker
    root = checkpoint_root(cfg)
    return TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"spec": spec, "control": control},
        scaling_config=ScalingConfig(
            num_workers=cfg.scaling.num_workers,
            use_gpu=cfg.scaling.use_gpu,
            resources_per_worker=resources,
            label_selector=dict(cfg.scaling.label_selector) or None,
        ),
        run_config=RunConfig(
            name=root.name,
            storage_path=str(root.parent),
            failure_config=FailureConfig(max_failures=cfg.run.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=cfg.checkpoint.keep_last),
            logging_config=LoggingConfig(log_level="WARNING"),
            worker_runtime_env={"env_vars": dict(worker_env)} if worker_env else None,
        ),
    )


def local_run(cfg: ServiceConfig, spec: LoopSpec, control: Any, console: Console, root: Path) -> LocalRun:
    """The loop of a `run.backend: local` run, checkpointing under `root`."""
    keep_last, use_gpu, say = cfg.checkpoint.keep_last, cfg.scaling.use_gpu, console_writer(console)

    def make_context() -> (
        LocalContext
    ):  # in the run's thread: no CUDA device fails the run, as a worker's would
        return LocalContext(root, keep_last, local_device(use_gpu), say=say)

    return LocalRun(spec, control, make_context)


def local_checkpoints_problem(root: Path) -> str | None:
    """Checkpoints that only a local run can continue: Ray Train resumes from the ones it registered,
    and where it never ran (no storage marker of its own) it would start again at step 1 beside them."""
    if not list_checkpoints(root) or (root / RAY_TRAIN_MARKER).exists():
        return None
    return (
        f"run.backend: 'ray_train' cannot continue the checkpoints in {root} (run.backend=local wrote "
        "them, and Ray Train would start again at step 1); resume with --set run.backend=local"
    )


def console_writer(console: Console) -> Callable[[str], None]:
    """Writes the in-process loop's lines as Ray's forwarded worker lines are: around a live display."""

    def say(line: str) -> None:
        with console.external_output():
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    return say
