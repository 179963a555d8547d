"""torch.compile behind a capability check: CUDA with compute capability >= 7, or a CPU with a
C++ compiler for inductor's C++ backend; eager elsewhere.

Asking for compilation where it is not supported is not an error: the caller gets the eager
function back and one warning per reason is logged. Compiling happens at the first call of each
new shape (seconds to a minute on a small CPU), so timings must come after a warm-up.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from typing import TypeVar

import torch

log = logging.getLogger(__name__)
_warned: set[str] = set()

F = TypeVar("F", bound=Callable)


def compile_unsupported_reason(device: torch.device | str) -> str | None:
    """Why torch.compile is not used on `device`, or None when it is supported."""
    device = torch.device(device)
    if device.type == "cpu":
        compiler = os.environ.get("CXX", "g++")
        if shutil.which(compiler) is None and shutil.which("c++") is None:
            return f"no C++ compiler ({compiler} or c++) for inductor's CPU backend"
        return None
    if device.type != "cuda":
        return f"device {device.type!r} is neither CUDA nor CPU"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 7:
        return f"compute capability {major}.{minor} < 7.0"
    return None


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


def maybe_compile(
    fn: F,
    *,
    device: torch.device | str,
    enabled: bool,
    what: str,
    mode: str | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = None,
) -> F:
    """`torch.compile(fn, ...)` when enabled and supported on `device`; `fn` itself otherwise."""
    if not enabled:
        return fn
    reason = compile_unsupported_reason(device)
    if reason is not None:
        _warn_once(f"torch.compile requested for {what} but {reason}: running eagerly")
        return fn
    return torch.compile(fn, mode=mode, fullgraph=fullgraph, dynamic=dynamic)


def release_compile_workers() -> None:
    """Shut down the compile workers inductor keeps for the process (a thread pool for C++ kernels,
    process pools for Triton), as torch itself does at exit. For a process that compiled and goes on
    doing other work (a test session, the benchmark); a later compile starts them again. Does
    nothing when inductor was never imported."""
    import sys

    async_compile = sys.modules.get("torch._inductor.async_compile")
    if async_compile is None:
        return
    async_compile.shutdown_compile_workers()  # the process pools torch tracks
    pool = getattr(async_compile.AsyncCompile, "pool", None)  # the thread pool, cached, untracked
    if pool is not None and hasattr(pool, "cache_info") and pool.cache_info().currsize:
        pool().shutdown(wait=True)
        pool.cache_clear()
