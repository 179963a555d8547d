"""One cgroup v2 cgroup per sandbox, under a delegated subtree: `pids.max` and, where the memory
controller is enabled there, `memory.max`.

The parent is this process's own cgroup in the unified hierarchy (`0::/path` in /proc/self/cgroup),
which must offer `pids` to its children: enabled in its `cgroup.subtree_control` already (systemd's
`Delegate=yes`, a container runtime's delegated cgroup), or enabled here when the directory is
writable and holds no process of its own (cgroup v2 allows controllers for children only then).
"""

from __future__ import annotations

import os
from pathlib import Path

from rewards.sandbox.cgroup import PREFIX, kill_members, members, remove, sweep, unique_name

UNIFIED_MOUNTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def own_cgroup_v2(
    mounts: tuple[Path, ...] = UNIFIED_MOUNTS, self_cgroup: str = "/proc/self/cgroup"
) -> Path | None:
    """This process's directory in the unified hierarchy, or None where none is mounted."""
    relative = next(
        (line[3:] for line in _read(Path(self_cgroup)).splitlines() if line.startswith("0::")), None
    )
    if relative is None:
        return None
    for mount in mounts:
        if (mount / "cgroup.controllers").exists():
            own = mount / relative.lstrip("/")
            return own if own.is_dir() else None
    return None


def delegated_parent(own: Path | None) -> tuple[Path | None, str]:
    """(the directory to make sandbox cgroups in, "") or (None, why there is none)."""
    if own is None:
        return None, "no cgroup v2 hierarchy is mounted"
    if "pids" not in _read(own / "cgroup.controllers").split():
        return None, f"cgroup v2 offers no pids controller at {own}"
    if not os.access(own, os.W_OK):
        return None, f"the cgroup v2 directory {own} is not writable (no delegated subtree)"
    if "pids" not in _read(own / "cgroup.subtree_control").split():
        try:
            (own / "cgroup.subtree_control").write_text("+pids")
        except OSError as exc:
            return None, f"pids cannot be enabled for children of {own} ({exc.strerror}): delegate a subtree"
    return own, ""


class ExecutionCgroupsV2:
    """The cgroup of one sandbox under a delegated v2 parent: pids always, memory where enabled."""

    def __init__(self, parent: Path, *, processes: int, memory_mb: int | None) -> None:
        sweep(parent)
        self.directory = parent / unique_name()
        self.directory.mkdir()
        self.memory = False
        try:
            (self.directory / "pids.max").write_text(str(processes))
            if memory_mb is not None and "memory" in _read(parent / "cgroup.subtree_control").split():
                (self.directory / "memory.max").write_text(str(memory_mb << 20))
                self.memory = True
                try:  # no swapping past the limit (absent where swap accounting is off)
                    (self.directory / "memory.swap.max").write_text("0")
                except OSError:
                    pass
        except BaseException:
            self.close()
            raise

    @property
    def procs_files(self) -> list[str]:
        return [str(self.directory / "cgroup.procs")]

    def address_space_mb(self, memory_mb: int) -> int:
        return memory_mb * 4 if self.memory else memory_mb

    def members(self) -> list[int]:
        return members(self.directory)

    def kill(self) -> bool:
        try:  # one write kills every member at once (Linux 5.14 and later)
            (self.directory / "cgroup.kill").write_text("1")
        except OSError:
            pass
        return kill_members(self.directory)

    def oom_kills(self) -> int:
        for line in _read(self.directory / "memory.events").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def close(self) -> bool:
        self.kill()
        return remove(self.directory)


__all__ = ["PREFIX", "ExecutionCgroupsV2", "delegated_parent", "own_cgroup_v2"]
