"""One cgroup v1 pids cgroup (and, where it works, a memory cgroup) per sandbox (`cgroup_v1`).

The pids controller caps a fork bomb: `pids.max` is written before the launcher joins, and the
launcher joins before it can fork. `cgroup.procs` lists every member, which is how the deadline kills everything. The
directories are made under this process's own cgroup (so a limit above it still binds) and removed
after each execution; ones left by a process that died are swept on first use.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "grpo-sandbox-"
_counter = itertools.count()
_swept: set[Path] = set()
_sweep_lock = threading.Lock()


def own_cgroup(controller: str, root: Path = CGROUP_ROOT) -> Path | None:
    """This process's cgroup directory for a v1 controller, or None when it is not mounted here."""
    mount = root / controller
    if not (mount / "cgroup.procs").exists():
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            own = mount / path.lstrip("/")
            return own if own.is_dir() else mount
    return None


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def members(directory: Path) -> list[int]:
    try:
        return [int(pid) for pid in (directory / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_members(directory: Path, rounds: int = 50) -> bool:
    """SIGKILL every member until none is left (a fork between reading and killing is caught next round)."""
    for _ in range(rounds):
        pids = members(directory)
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.002)
    return not members(directory)


def remove(directory: Path, attempts: int = 100) -> bool:
    """rmdir once empty (members that are exiting leave within milliseconds)."""
    for _ in range(attempts):
        try:
            directory.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            kill_members(directory, rounds=2)
            time.sleep(0.005)
    return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(parent: Path) -> None:
    """Remove the per-execution cgroups that a dead process of ours left under `parent` (once per parent)."""
    with _sweep_lock:
        if parent in _swept:
            return
        _swept.add(parent)
    for child in parent.glob(PREFIX + "*"):
        try:
            owner = int(child.name[len(PREFIX) :].split("-")[0])
        except ValueError:
            continue
        if owner != os.getpid() and not _pid_alive(owner):
            kill_members(child)
            remove(child, attempts=5)


def unique_name() -> str:
    """A cgroup name of this process's own: its pid first, so `sweep` can tell whose it was."""
    return f"{PREFIX}{os.getpid()}-{next(_counter)}-{os.urandom(3).hex()}"


def v1_unavailable_reason(root: Path = CGROUP_ROOT) -> str | None:
    parent = own_cgroup("pids", root)
    if parent is None:
        return f"the cgroup v1 pids controller is not mounted at {root / 'pids'}"
    if not os.access(parent, os.W_OK):
        return f"the cgroup v1 pids controller at {parent} is not writable"
    return None


class ExecutionCgroups:
    """The cgroups of one sandbox: `pids` always, `memory` when the controller can be used here."""

    def __init__(self, *, processes: int, memory_mb: int | None, root: Path = CGROUP_ROOT) -> None:
        name = unique_name()
        self.pids: Path | None = None
        self.memory: Path | None = None
        pids_parent = own_cgroup("pids", root)
        if pids_parent is None:
            raise OSError(f"the cgroup v1 pids controller is not mounted at {root / 'pids'}")
        sweep(pids_parent)
        self.pids = pids_parent / name
        self.pids.mkdir()
        try:
            _write(self.pids / "pids.max", str(processes))
            if memory_mb is not None:
                self._make_memory(root, name, memory_mb)
        except BaseException:
            self.close()
            raise

    def _make_memory(self, root: Path, name: str, memory_mb: int) -> None:
        parent = own_cgroup("memory", root)
        if parent is None:
            return
        sweep(parent)
        directory = parent / name
        try:
            directory.mkdir()
        except OSError:
            return  # the memory limit is optional: RLIMIT_AS still binds
        self.memory = directory
        limit = str(memory_mb << 20)
        _write(directory / "memory.limit_in_bytes", limit)
        try:  # no swapping past the limit either (only where swap accounting is on)
            _write(directory / "memory.memsw.limit_in_bytes", limit)
        except OSError:
            pass

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in (self.pids, self.memory) if d is not None]

    def address_space_mb(self, memory_mb: int) -> int:
        """RLIMIT_AS for a program of `memory_mb`: 4x with the memory cgroup (which then binds what is
        touched; interpreters map far more than they use), 1x where it alone has to bind."""
        return memory_mb * 4 if self.memory is not None else memory_mb

    def members(self) -> list[int]:
        return members(self.pids) if self.pids is not None else []

    def kill(self) -> bool:
        return kill_members(self.pids) if self.pids is not None else True

    def oom_kills(self) -> int:
        """How many processes the memory cgroup's OOM killer ended (0 without a memory cgroup)."""
        if self.memory is None:
            return 0
        try:
            for line in (self.memory / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
            return 0
        except (OSError, ValueError):
            return 0

    def close(self) -> bool:
        """Kill what is left and remove the directories; True when both are gone."""
        removed = True
        for directory in (self.pids, self.memory):
            if directory is not None:
                kill_members(directory)
                removed = remove(directory) and removed
        return removed
