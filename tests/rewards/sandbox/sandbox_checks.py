"""What an execution may leave behind, looked for from outside: cgroup directories and processes."""

from __future__ import annotations

import os
from pathlib import Path

from rewards.sandbox.cgroup import PREFIX, own_cgroup

OWN_PREFIX = f"{PREFIX}{os.getpid()}-"


def leftover_cgroups() -> list[str]:
    """Per-execution cgroup directories of this process still present (pids and memory)."""
    found = []
    for controller in ("pids", "memory"):
        parent = own_cgroup(controller)
        if parent is not None:
            found += [str(p) for p in parent.glob(OWN_PREFIX + "*")]
    return found


def processes_in_own_cgroups() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if OWN_PREFIX in (entry / "cgroup").read_text():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line names `marker` (this one excepted)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                status = (entry / "status").read_text()
            except OSError:
                continue
            if marker.encode() in cmdline and "\nState:\tZ" not in status:
                found.append(int(entry.name))
    return found
