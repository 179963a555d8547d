"""A run's Ray: the cluster in RAY_ADDRESS (set under `ray job submit`) joined, or one started for the
run on this machine, offering every resource and label the run asks for."""

from __future__ import annotations

import logging
import math
import os
import sys

import ray

from actors.run.control import TRAIN_POLL_DEFAULT_S, TRAIN_POLL_ENV
from actors.run.omp_env import apply_wait_policy
from service.config import ServiceConfig
from service.console import Console, Verbosity, is_terminal
from service.console.ray_logs import filter_worker_lines, quiet_driver_loggers
from service.preflight.relations import cpus_needed, pool_workers_at_most
from service.ray_group import own_process_groups

PREEMPTION_WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"  # ray.train.v2's constants


def custom_resources_needed(cfg: ServiceConfig) -> dict[str, float]:
    """Custom resources the trainer group and the reward pool take together (`*.resources*` keys)."""
    needed: dict[str, float] = {}
    for count, each in (
        (cfg.scaling.num_workers, cfg.scaling.resources_per_worker),
        (pool_workers_at_most(cfg), cfg.pool.resources),
    ):
        for name, amount in each.items():
            needed[name] = needed.get(name, 0.0) + count * amount
    return needed


def local_node_labels(cfg: ServiceConfig) -> dict[str, str]:
    """Labels that let one embedded node satisfy the plain `key: value` selectors of both groups."""
    labels = dict(cfg.scaling.label_selector)
    labels.update(cfg.pool.label_selector)
    return {k: v for k, v in labels.items() if not v.startswith("!") and not v.endswith(")")}


def init_ray(cfg: ServiceConfig, console: Console) -> bool:
    """Join the cluster in RAY_ADDRESS (set under `ray job submit`) or start a local one; True if started here.

    Never `ray.init()` without an address: that would join any cluster running on this machine.
    Unless `--verbose`, Ray's INFO lines are off and its chatter filtered (`service.console.ray_logs`).
    """
    verbose = getattr(console, "verbosity", None) is Verbosity.VERBOSE
    quiet = getattr(console, "verbosity", None) is Verbosity.QUIET
    level = logging.INFO if verbose else logging.WARNING
    if not verbose:
        quiet_driver_loggers()
    os.environ.setdefault(TRAIN_POLL_ENV, TRAIN_POLL_DEFAULT_S)  # a user's own value wins
    if not is_terminal(sys.stdout):  # a job log or a file: Ray's worker-line prefixes without colour codes
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    address = os.environ.get("RAY_ADDRESS")
    if address:
        context = ray.init(address=address, log_to_driver=True, logging_level=level)
        started = False
    else:
        apply_wait_policy(cfg.scaling)  # the local workers inherit it
        # Ray Train's preemption watcher (an actor polling for nodes being drained) has nothing to
        # watch on a node this process starts and ends: no autoscaler drains it. A user's value wins.
        os.environ.setdefault(PREEMPTION_WATCHER_ENV, "0")
        num_cpus = cfg.run.num_cpus or max(os.cpu_count() or 1, math.ceil(cpus_needed(cfg)))
        # One node plays every role: it offers the custom resources and labels the run asks for.
        # Its processes lead groups of their own: a signal to the driver's group is the driver's.
        with own_process_groups():
            context = ray.init(
                address="local", num_cpus=num_cpus, include_dashboard=cfg.run.dashboard,
                resources=custom_resources_needed(cfg) or None, labels=local_node_labels(cfg) or None,
                log_to_driver=True, logging_level=level,
            )  # fmt: skip
        started = True
    if not verbose:
        filter_worker_lines(console.external_output, quiet=quiet)
    if url := getattr(context, "dashboard_url", None):  # Ray's own line saying it is filtered above
        console.header(f"[train] Ray dashboard: {url if '://' in url else 'http://' + url}")
    if not started:
        _warn_if_short(cfg, console)
    return started


def _warn_if_short(cfg: ServiceConfig, console: Console) -> None:
    """A cluster that lacks the run's resources now may still get them from an autoscaler: warn only."""
    have = ray.cluster_resources()
    gpus = cfg.scaling.num_workers * cfg.scaling.gpus_per_worker if cfg.scaling.use_gpu else 0.0
    needed = {"CPU": cpus_needed(cfg), "GPU": gpus, **custom_resources_needed(cfg)}
    short = {name: amount for name, amount in needed.items() if have.get(name, 0.0) < amount}
    if short:
        asked = ", ".join(f"{amount:g} {name}" for name, amount in needed.items() if amount)
        has = ", ".join(f"{have.get(name, 0.0):g} {name}" for name in needed if needed[name])
        console.warning(f"the run asks for {asked}; the cluster has {has} now (waiting for more)")
