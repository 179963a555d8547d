"""One unprivileged uid per running sandbox on the host, held with a lock file.

Where the caller is root, each sandbox runs its program as a uid of its own (`FIRST_UID` on, one per
sandbox that runs at the same time on the host, whichever process started it): the program is never
root outside, and RLIMIT_NPROC, which the kernel counts per uid, caps exactly that sandbox's
processes. A slot is held with an exclusive `flock` on its file under `SLOT_DIRS` for the sandbox's
whole life (the kernel releases it when the holder dies). A holder writes its pid into the file and
empties it on release, once nothing of its sandbox runs any more; a slot taken with a pid still in
its file was left by a holder that died, and whatever still runs as that uid is killed (and waited
for) first. The range must be unused on the host
(60100-61099: below systemd's dynamic users at 61184, in the span Debian keeps for its own global
allocations, which hosts leave unused).
"""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

FIRST_UID = 60100
SLOTS = 1000
SLOT_DIRS = (Path("/run/grpo-sandbox"), Path("/tmp/grpo-sandbox-slots"))
KILL_ALL = "kill -9 -1 2>/dev/null; exit 0"  # as the slot's uid: every process of that uid but the shell
LEFTOVER_WAIT_S = 5.0
_lock = threading.Lock()
_held: set[int] = set()  # slots this process holds (flock is per open file, so a second open would succeed)


class SlotError(OSError):
    """No uid slot could be taken (all held, or no private place for the lock files)."""


def slots_usable() -> str | None:
    """None where slots can be taken here (root, a lock directory of root's), else why not."""
    if os.geteuid() != 0:
        return "the caller is not root, so it cannot run each sandbox as a uid of its own"
    try:
        slot_dir()
    except SlotError as exc:
        return str(exc)
    return None


def slot_dir() -> Path:
    """The first of SLOT_DIRS that is (or can be made) a directory of root's that no one else may write."""
    problems = []
    for directory in SLOT_DIRS:
        try:
            directory.mkdir(mode=0o700, exist_ok=True)
            info = os.lstat(directory)
        except OSError as exc:
            problems.append(f"{directory}: {exc.strerror}")
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o022:
            return directory
        problems.append(f"{directory} is not a directory of root's that only root may write")
    raise SlotError("no place for the sandbox's uid slots: " + "; ".join(problems))


class UidSlot:
    """A uid held for one sandbox; `release` (or the holder's death) frees it."""

    def __init__(self) -> None:
        directory = slot_dir()
        self.uid = 0
        self._fd = -1
        with _lock:
            for index in range(SLOTS):
                uid = FIRST_UID + index
                if uid in _held:
                    continue
                fd = os.open(
                    directory / f"uid-{uid}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
                )
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                _held.add(uid)
                self.uid, self._fd = uid, fd
                break
        if self._fd < 0:
            raise SlotError(f"all {SLOTS} sandbox uid slots ({FIRST_UID}-{FIRST_UID + SLOTS - 1}) are in use")
        left_by_dead_holder = os.pread(self._fd, 32, 0).strip()
        if left_by_dead_holder and not (self.kill_all() and wait_until_gone(self.uid, LEFTOVER_WAIT_S)):
            self.release()
            raise SlotError(f"processes of uid {self.uid} left by an earlier sandbox could not be killed")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode(), 0)

    def kill_all(self) -> bool:
        """SIGKILL every process of this slot's uid, as that uid (it can signal nothing else)."""
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", KILL_ALL],
                user=self.uid,
                group=self.uid,
                extra_groups=[],
                env={"PATH": "/usr/bin:/bin"},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0

    def release(self, clean: bool = True) -> None:
        """Free the slot; `clean`: nothing of the sandbox runs any more (the next holder need not wait)."""
        if self._fd < 0:
            return
        with _lock:
            if clean:
                os.ftruncate(self._fd, 0)
            _held.discard(self.uid)
            os.close(self._fd)
            self._fd = -1


def processes_of(uid: int) -> list[int]:
    """Live processes whose real uid is `uid` (read from /proc/*/status)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        line = status[status.find(b"\nUid:") + 5 :].split(b"\n", 1)[0].split()
        if line and int(line[0]) == uid and b"\nState:\tZ" not in status:
            found.append(int(entry))
    return found


def wait_until_gone(uid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while processes_of(uid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True
