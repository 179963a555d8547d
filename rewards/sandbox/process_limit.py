"""How a sandbox's processes are capped (`SandboxLimits.process_limit`), and what holds one sandbox.

- `cgroup_v2`: a cgroup under a delegated v2 subtree (`cgroup_v2.py`), `pids.max` (and `memory.max`);
- `cgroup_v1`: a cgroup under the v1 pids (and memory) controllers (`cgroup.py`);
- `uid`: RLIMIT_NPROC on the sandbox slot's own uid (`uid_slots.py`), which needs no cgroup at all;
  the kernel counts every process and thread of that uid, and the uid is the sandbox's alone;
- `auto`: the first of these that works here, in that order (checked once per process).

Where the caller is root, every method runs the program as the slot's uid (never root outside); the
uid method needs root for that. Without a memory cgroup (the uid method, or no memory controller),
RLIMIT_AS alone bounds memory, at `memory_mb`.
"""

from __future__ import annotations

import os
import threading

from rewards.sandbox.cgroup import ExecutionCgroups, v1_unavailable_reason
from rewards.sandbox.cgroup_v2 import ExecutionCgroupsV2, delegated_parent, own_cgroup_v2
from rewards.sandbox.uid_slots import LEFTOVER_WAIT_S, UidSlot, slots_usable, wait_until_gone

PROCESS_LIMITS = ("auto", "cgroup_v1", "cgroup_v2", "uid")
AUTO_ORDER = ("cgroup_v2", "cgroup_v1", "uid")
_lock = threading.Lock()
_chosen: dict[str, tuple[str | None, str | None]] = {}


def check_method(method: str) -> None:
    if method not in PROCESS_LIMITS:
        raise ValueError(f"process_limit must be one of {', '.join(PROCESS_LIMITS)}, got {method!r}")


def method_unavailable_reason(method: str) -> str | None:
    """None where `method` (not auto) can cap processes here, else one line saying why not."""
    if method == "cgroup_v1":
        return v1_unavailable_reason()
    if method == "cgroup_v2":
        return delegated_parent(own_cgroup_v2())[1] or None
    return slots_usable()


def resolve(method: str) -> tuple[str | None, str | None]:
    """(the method to use, None) or (None, why none works); `auto` tries AUTO_ORDER. Once per process."""
    check_method(method)
    with _lock:
        if method not in _chosen:
            candidates = AUTO_ORDER if method == "auto" else (method,)
            reasons = []
            for candidate in candidates:
                reason = method_unavailable_reason(candidate)
                if reason is None:
                    _chosen[method] = (candidate, None)
                    break
                reasons.append(f"{candidate}: {reason}")
            else:
                _chosen[method] = (
                    None,
                    "no way to cap the sandbox's processes here (" + "; ".join(reasons) + ")",
                )
        return _chosen[method]


class Confinement:
    """What holds one sandbox: the slot's uid (where the caller is root), and its cgroup or RLIMIT_NPROC.

    `outside_processes` is how many of the sandbox's `processes` run as root outside the slot's uid
    (bubblewrap itself, and its init in a fresh sandbox): a cgroup counts them, RLIMIT_NPROC does not,
    so the program is allowed the same number of its own either way."""

    def __init__(self, method: str, *, processes: int, memory_mb: int | None, outside_processes: int) -> None:
        self.method = method
        self.cgroups: ExecutionCgroups | ExecutionCgroupsV2 | None = None
        self.nproc: int | None = None
        self.slot = UidSlot() if os.geteuid() == 0 else None
        try:
            if method == "cgroup_v1":
                self.cgroups = ExecutionCgroups(processes=processes, memory_mb=memory_mb)
            elif method == "cgroup_v2":
                parent, reason = delegated_parent(own_cgroup_v2())
                if parent is None:
                    raise OSError(reason)
                self.cgroups = ExecutionCgroupsV2(parent, processes=processes, memory_mb=memory_mb)
            elif self.slot is not None:
                self.nproc = max(1, processes - outside_processes)
            else:
                raise OSError(slots_usable())
        except BaseException:
            self.close()
            raise

    @property
    def slot_uid(self) -> int | None:
        return self.slot.uid if self.slot is not None else None

    @property
    def procs_files(self) -> list[str]:
        return self.cgroups.procs_files if self.cgroups is not None else []

    def address_space_mb(self, memory_mb: int) -> int:
        return self.cgroups.address_space_mb(memory_mb) if self.cgroups is not None else memory_mb

    def oom_kills(self) -> int:
        return self.cgroups.oom_kills() if self.cgroups is not None else 0

    def kill(self) -> bool:
        """SIGKILL every process of the sandbox (its cgroup's members, or its uid's processes)."""
        if self.cgroups is not None:
            return self.cgroups.kill()
        return self.slot.kill_all() if self.slot is not None else True

    def close(self, settled: bool = False) -> bool:
        """Kill what is left, remove the cgroup and free the slot; True when nothing of the sandbox is
        left. `settled`: bubblewrap exited by itself, which it does only once its pid namespace is
        gone (so the slot's uid runs nothing; otherwise it is killed and waited for)."""
        gone = True
        if self.cgroups is not None:
            gone = self.cgroups.close()
        elif self.slot is not None and not settled:
            gone = self.slot.kill_all() and wait_until_gone(self.slot.uid, LEFTOVER_WAIT_S)
        if self.slot is not None:
            self.slot.release(clean=gone)
        return gone
