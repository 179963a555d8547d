"""Relations between config values that no single key's validation sees, checked before anything
starts: CPUs of the embedded Ray against what the run reserves, a GPU request without CUDA,
storage that cannot be written. Each returns one line naming the key, or None."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any


def cpus_needed(cfg: Any) -> float:
    """Logical CPUs the run reserves: its trainer workers, its reward workers (as many as an
    autoscaled pool may grow to) and its sampler actors."""
    return (
        cfg.scaling.num_workers * cfg.scaling.cpus_per_worker
        + pool_workers_at_most(cfg) * cfg.pool.cpus_per_worker
        + sampler_actors(cfg) * cfg.sampling.actors.cpus_per_actor
    )


def pool_workers_at_most(cfg: Any) -> int:
    """The most reward workers the run's pool has at once."""
    autoscale = cfg.pool.autoscale
    return cfg.pool.num_workers if autoscale is None else autoscale.max_workers


def autoscale_problem(cfg: Any) -> str | None:
    """`pool.autoscale` sizes a pool that scores the ranks' rewards, which follow its roster."""
    if cfg.pool.autoscale is None:
        return None
    if cfg.task.name == "env":
        return (
            "pool.autoscale sizes the pool by the trainer's wait for rewards; an environment task's pool "
            "plays episodes, and keeps pool.num_workers: leave pool.autoscale unset"
        )
    if cfg.sampling.placement == "actors":
        return (
            "pool.autoscale with sampling.placement=actors: the sampler actors score on a pool of fixed "
            "size; use sampling.placement=trainer or leave pool.autoscale unset"
        )
    return None


def sampler_actors(cfg: Any) -> int:
    """The run's sampler actors (`sampling.placement: actors`: sampling.actors.num per trainer worker)."""
    return cfg.scaling.num_workers * cfg.sampling.actors.num if cfg.sampling.placement == "actors" else 0


def sampler_actors_problem(cfg: Any) -> str | None:
    """Sampler actors sample single-turn tasks: an environment's episodes are played by the ranks."""
    if cfg.sampling.placement == "actors" and cfg.task.name == "env":
        return (
            "sampling.placement=actors samples single-turn tasks; an environment task's episodes are played "
            "by the trainer ranks: use sampling.placement=trainer"
        )
    return None


def num_cpus_problem(cfg: Any) -> str | None:
    """`run.num_cpus` below the run's reservations would leave a worker waiting for ever."""
    need = math.ceil(cpus_needed(cfg))
    if cfg.run.num_cpus is not None and cfg.run.num_cpus < need:
        return (
            f"run.num_cpus: {cfg.run.num_cpus} is below the {need} CPUs the run reserves "
            f"(scaling: {cfg.scaling.num_workers} x {cfg.scaling.cpus_per_worker:g}, "
            f"pool: {pool_workers_at_most(cfg)} x {cfg.pool.cpus_per_worker:g}"
            + (
                f", sampling.actors: {sampler_actors(cfg)} x {cfg.sampling.actors.cpus_per_actor:g}"
                if sampler_actors(cfg)
                else ""
            )
            + "); raise it or leave it unset"
        )
    return None


def gpu_problem(cfg: Any) -> str | None:
    """A GPU run on a machine without CUDA (only meaningful where the run's own Ray starts)."""
    if not cfg.scaling.use_gpu:
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return (
        "scaling.use_gpu: true, but this machine has no CUDA device and no cluster is given "
        "(RAY_ADDRESS); set scaling.use_gpu=false or submit to a cluster with GPUs"
    )


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def writable_problem(key: str, value: str | None) -> str | None:
    """A directory (or the nearest existing parent) where a file cannot be created."""
    if not value:
        return None
    where = _nearest_existing(Path(value).expanduser().resolve())
    if not where.is_dir():
        return f"{key}: {value!r} is not a directory ({str(where)!r} is a file)"
    try:
        with tempfile.NamedTemporaryFile(dir=where, prefix=".write-check-"):
            pass
    except OSError as exc:
        return f"{key}: {value!r} cannot be written ({exc.strerror or exc} in {str(where)!r})"
    return None


def relation_problems(cfg: Any, *, driver: bool) -> list[str]:
    """Every relation that fails. `driver`: checked where the run's driver runs, so its storage is
    checked there, and a GPU request too when no cluster is given (its own Ray starts here); the
    client checks what the config alone decides."""
    problems = [num_cpus_problem(cfg), sampler_actors_problem(cfg), autoscale_problem(cfg)]
    if driver:
        problems += [
            gpu_problem(cfg) if not os.environ.get("RAY_ADDRESS") else None,
            writable_problem("run.storage_path", cfg.run.storage_path),
            writable_problem("run.run_dir", cfg.run.run_dir),
        ]
    return [p for p in problems if p]
