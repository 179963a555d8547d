"""The machine a benchmark ran on: CPU, cores, memory, GPU, library versions, background load.

`machine_info()` is bench.json's `machine` object. Its `kind` names the hardware a figure belongs
to (the GPU's name where there is one, else the CPU's vendor, name, family and model), and a
result file per kind keeps what was measured there (`bench.result_file`).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

import torch

from actors.run.omp_env import usable_cores
from trainer.machine_figures import cpu_flags, cpu_info_field

# The CPU flags that change what a step computes in or how fast: wide vectors, bf16 dot products
# and matrix tiles (the shipped precision and kernels are chosen by them).
CPU_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
)
# What the flags mean to a reader, in the order they are named (`cpu_features`).
FEATURES = (
    ("avx512f", "AVX-512"),
    ("avx512_bf16", "AVX512-BF16"),
    ("amx_bf16", "AMX"),
    ("sve", "SVE"),
)
# Threading settings that change CPU timings a lot (OpenMP spin-waiting on a shared machine, above all).
THREAD_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "KMP_BLOCKTIME", "GOMP_SPINCOUNT", "MKL_NUM_THREADS")
VERSIONS = ("ray", "transformers", "peft", "numpy")  # besides Python and torch


def _int_or_none(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def cpu_info() -> dict[str, Any]:
    """The first CPU as Linux lists it: vendor, family, model, stepping, name and the flags that matter."""
    flags = cpu_flags()
    return {
        "vendor": cpu_info_field("vendor_id") or cpu_info_field("CPU implementer") or platform.machine(),
        "family": _int_or_none(cpu_info_field("cpu family")),
        "model": _int_or_none(cpu_info_field("model")),
        "stepping": _int_or_none(cpu_info_field("stepping")),
        "model_name": cpu_info_field("model name") or platform.processor() or platform.machine() or "unknown",
        "flags": [flag for flag in CPU_FLAGS if flag in flags],
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
    }


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


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cpu_name(cpu: dict[str, Any]) -> str:
    """The CPU's name without trademarks, clock or filler: 'Intel Xeon', 'AMD EPYC 9R14'."""
    name = re.sub(r"\((R|TM|tm|r)\)", "", cpu["model_name"])
    name = re.sub(r"@.*$|\b\d+-Core\b|\bProcessor\b|\bCPU\b", "", name)
    return " ".join(name.split()) or cpu["vendor"] or "unknown CPU"


def machine_kind(info: dict[str, Any]) -> str:
    """The result file's name for this hardware: the GPU's ('nvidia-h200') where there is one, else
    the CPU's name, family and model ('intel-xeon-6-167')."""
    if info.get("gpu"):
        return _slug(info["gpu"]["name"])
    cpu = info["cpu"]
    numbers = [str(cpu[k]) for k in ("family", "model") if cpu.get(k) is not None]
    return "-".join([_slug(cpu_name(cpu)), *numbers])


def cpu_features(cpu: dict[str, Any]) -> list[str]:
    """The flags that matter, as a reader names them: ['AVX-512', 'AVX512-BF16', 'AMX']."""
    return [label for flag, label in FEATURES if flag in cpu.get("flags", [])] or (
        ["AVX2"] if "avx2" in cpu.get("flags", []) else []
    )


def machine_label(info: dict[str, Any]) -> str:
    """The hardware in a few words: 'Intel Xeon (family 6 model 167; AVX-512, AVX512-BF16, AMX), 2 cores'
    or 'NVIDIA H200 (139.8 GiB), 16 cores'."""
    cores = f"{info['usable_cores']} cores"
    if info.get("gpu"):
        return f"{info['gpu']['name']} ({info['gpu']['memory_gib']} GiB), {cores}"
    cpu = info["cpu"]
    detail = [f"family {cpu['family']} model {cpu['model']}"] if cpu.get("family") is not None else []
    detail += [", ".join(cpu_features(cpu))] if cpu_features(cpu) else []
    return f"{cpu_name(cpu)} ({'; '.join(detail)}), {cores}" if detail else f"{cpu_name(cpu)}, {cores}"


def machine_info() -> dict[str, Any]:
    """Everything a reader needs to judge the figures measured on this machine."""
    info: dict[str, Any] = {
        "cpu": cpu_info(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "memory_gib": memory_gib(),
        "gpu": gpu_info(),
        "platform": platform.platform(),
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            **{package: _version(package) for package in VERSIONS},
        },
        "torch_default_threads": torch.get_num_threads(),
        "thread_env": {k: os.environ.get(k) for k in THREAD_ENV},
        "load_average_at_start": load_average(),
    }
    return {"kind": machine_kind(info), **info}


def describe(info: dict[str, Any]) -> str:
    """One line: 'Intel Xeon (family 6 model 167; AVX-512, AVX512-BF16, AMX), 2 cores, 23.5 GiB, no GPU;
    Python 3.11.7, torch 2.13.0, ray 2.60.0'."""
    gpu = "" if info.get("gpu") else ", no GPU"
    mem = f", {info['memory_gib']} GiB" if info.get("memory_gib") else ""
    versions = info["versions"]
    env = ", ".join(f"{k}={v}" for k, v in (info.get("thread_env") or {}).items() if v is not None)
    return (
        f"{machine_label(info)}{mem}{gpu}; "
        f"Python {versions['python']}, torch {versions['torch']}, ray {versions['ray']}"
        + (f"; {env}" if env else "")
    )


def _version(package: str) -> str:
    """An installed package's version without importing it ('absent' where it is not installed)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"
