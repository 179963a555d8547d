"""The machine a benchmark ran on: CPU, cores, memory, GPU, library versions, background load."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any

import numpy
import torch

from actors.run.omp_env import usable_cores


def cpu_model() -> str:
    """The CPU's model name as Linux reports it (platform.processor() elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)  # kB -> GiB
    except OSError:
        pass
    return None


def load_average() -> list[float] | None:
    """1-, 5- and 15-minute load averages: other work on the machine distorts timings."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def gpu_info() -> dict[str, Any] | None:
    """Name, memory and compute capability of the current CUDA device, or None without one."""
    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return {
        "name": props.name,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "capability": f"{props.major}.{props.minor}",
        "count": torch.cuda.device_count(),
        "cuda": torch.version.cuda,
    }


# Threading settings that change CPU timings a lot (OpenMP spin-waiting on a shared machine, above all).
THREAD_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "KMP_BLOCKTIME", "GOMP_SPINCOUNT", "MKL_NUM_THREADS")


def machine_info() -> dict[str, Any]:
    """Everything a reader needs to judge the figures measured on this machine."""
    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "memory_gib": memory_gib(),
        "gpu": gpu_info(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_default_threads": torch.get_num_threads(),
        "ray": _version("ray"),
        "numpy": numpy.__version__,
        "thread_env": {k: os.environ.get(k) for k in THREAD_ENV},
        "load_average_at_start": load_average(),
    }


def describe(info: dict[str, Any]) -> str:
    """One line: 'AMD EPYC, 2 cores, 7.8 GiB, no GPU; Python 3.11.7, torch 2.13.0, ray 2.60.0'."""
    gpu = info["gpu"]["name"] if info.get("gpu") else "no GPU"
    mem = f", {info['memory_gib']} GiB" if info.get("memory_gib") else ""
    env = ", ".join(f"{k}={v}" for k, v in (info.get("thread_env") or {}).items() if v is not None)
    return (
        f"{info['cpu_model']}, {info['usable_cores']} cores{mem}, {gpu}; "
        f"Python {info['python']}, torch {info['torch']}, ray {info['ray']}" + (f"; {env}" if env else "")
    )


def _version(package: str) -> str:
    """An installed package's version without importing it ('absent' where it is not installed)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"
