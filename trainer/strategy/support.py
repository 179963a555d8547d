"""Whether this torch runs FSDP2 as the fsdp strategy uses it, said in one line when it does not.

FSDP2's `fully_shard` is public from torch 2.6; the strategy also forces gloo's gradient reduction
to a plain sum (`set_force_sum_reduction_for_comms`, torch 2.8), which keeps the average right on
CPU whatever the backend does with ReduceOp.AVG. So: torch >= 2.8 on either backend. Read from the
installed version's metadata, so the driver can refuse a run without importing torch.
"""

from __future__ import annotations

import re
from importlib import metadata

MIN_TORCH = (2, 8)


def _release(version: str) -> tuple[int, ...]:
    """(major, minor) of a version string such as '2.13.0+cpu'."""
    parts = re.findall(r"\d+", version)[:2]
    return tuple(int(p) for p in parts)


def torch_too_old(version: str, device_type: str = "cpu") -> str | None:
    """The line refusing fsdp under torch `version`, or None when it is new enough."""
    if _release(version) >= MIN_TORCH:
        return None
    backend = "gloo" if device_type == "cpu" else "NCCL"
    need = ".".join(map(str, MIN_TORCH))
    return (
        f"scaling.strategy=fsdp needs torch >= {need} (FSDP2's fully_shard with a plain-sum gradient "
        f"reduction on {backend}); this torch is {version}: upgrade torch or use scaling.strategy=ddp"
    )


def installed_torch() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def fsdp_unavailable_reason(device_type: str = "cpu") -> str | None:
    """Why fsdp cannot run with the installed torch on `device_type`; None when it can."""
    version = installed_torch()
    if version is None:
        return "scaling.strategy=fsdp needs torch, which is not installed"
    return torch_too_old(version, device_type)
