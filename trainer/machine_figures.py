"""Figures of this machine that a run's choices depend on: measured once, kept, read by every run.

A choice made by timing (`precision.dtype: auto` on a CPU with AVX512-BF16 dot products but no
AMX tiles weighs bf16 against fp32 matmuls) can come out differently from one start to the next
when the figure lies near its threshold or the machine is busy, and two runs of one config would
then compute differently. So such a figure is measured once per machine and kept in a small JSON
file that every later process on the machine reads instead of timing again:

    $GRPO_MACHINE_FIGURES                                  when set (`off`: measure in every process, keep nothing)
    $XDG_CACHE_HOME/grpo-service/machine-figures.json      else (~/.cache when XDG_CACHE_HOME is unset)

The file holds one entry per machine key (the CPU's model, family and flags, the usable cores and
torch's version), so a home directory shared by several kinds of node keeps each one's figures.
It is written atomically; an unreadable or torn file counts as empty.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

ENV = "GRPO_MACHINE_FIGURES"
OFF = "off"
_lock = threading.Lock()


@functools.lru_cache(maxsize=8)
def cpu_info_field(name: str) -> str:
    """The first CPU's `name` field in /proc/cpuinfo ('' where it is missing or not readable)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        pass
    return ""


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (empty where /proc/cpuinfo is not readable)."""
    return frozenset(cpu_info_field("flags").split())


def machine_key() -> str:
    """What a kept figure belongs to: this CPU (model, family, flags), its usable cores, torch's version."""
    flags = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:12]
    fields = [cpu_info_field(k) for k in ("vendor_id", "model name", "cpu family", "model")]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return "|".join([*fields, f"flags:{flags}", f"cores:{cores}", f"torch:{torch.__version__}"])


def figures_path() -> Path | None:
    """Where kept figures live; None when keeping is off."""
    setting = os.environ.get(ENV, "").strip()
    if setting.lower() == OFF:
        return None
    if setting:
        return Path(setting)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "grpo-service" / "machine-figures.json"


def _read(path: Path) -> dict:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def _write(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@functools.lru_cache(maxsize=16)
def kept_figure(name: str, measure: Callable[[], float]) -> tuple[float, str]:
    """(the figure `name` of this machine, where it comes from): read from the figures file when
    this machine's entry holds it, else `measure()`d now and kept there. Once per process; the
    processes of a machine measure one at a time (a lock file beside it), so the second reads
    what the first measured."""
    path = figures_path()
    if path is None:
        return measure(), "measured now (keeping is off)"
    key = machine_key()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_name(path.name + ".lock"), "a")  # noqa: SIM115 - held across the measurement
    except OSError as exc:
        return measure(), f"measured now (not kept: {exc.strerror or exc})"
    with _lock, lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        document = _read(path)
        entry = document.get(key) if isinstance(document.get(key), dict) else {}
        kept = entry.get(name)
        if isinstance(kept, dict) and isinstance(kept.get("value"), int | float):
            when = kept.get("measured", "an earlier run")
            return float(kept["value"]), f"measured on {when}, kept in {path}"
        value = float(measure())
        entry[name] = {"value": value, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
        document[key] = entry
        try:
            _write(path, document)
        except OSError as exc:
            return value, f"measured now (not kept: {exc.strerror or exc})"
        return value, f"measured now, kept in {path}"
