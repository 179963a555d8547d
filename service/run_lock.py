"""One writer per run directory: a lock file in it, held with `flock` for the driver's whole life.

    lock = claim_run_dir(run_dir, log=console.warning)  # RunDirBusy (naming the owner) if taken
    with lock:                                           # heartbeat thread; released, file removed
        ...the run...
    check_free(run_dir)                                  # a read-only look, for an early refusal

Why flock on a file: the kernel grants LOCK_EX to exactly one open file, so two drivers started
at the same instant cannot both win, and it drops the lock however its holder dies (SIGKILL, the
OOM killer), so a killed run never needs cleaning up by hand. Within one kernel (one machine, its
containers included) a free flock is therefore proof that the last holder is gone, whatever its
pid is now used for (a restarted pod reuses pids and host names).

The file's content names the owner (host, pid, Ray job submission id, start and heartbeat times)
for the refusal message, and covers what flock may not: a driver on another machine sharing
`run.storage_path` (NFS mounted `local_lock=flock`, object-store FUSE mounts) can hold a flock we
never see. Its record is rewritten every HEARTBEAT_S; a record from another kernel whose
heartbeat is younger than STALE_AFTER_S keeps the directory taken even when our flock is free.
A lock whose holder is gone is taken over, with one line saying whose it was and how old.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

LOCK_FILE = ".run.lock"
HEARTBEAT_S = 5.0
STALE_AFTER_S = 60.0  # a heartbeat missed for 12 periods: long enough for a slow shared filesystem
RECORD_BYTES = 1024  # every record is padded to this size and rewritten by one pwrite, never truncated
BUSY_RETRY_S = 0.5  # a reader's shared flock (check_free) holds the file for microseconds
# Set by Ray's job supervisor for `ray job submit` entrypoints (ray._private.runtime_env.constants
# RAY_JOB_CONFIG_JSON_ENV_VAR); its "metadata" holds JOB_ID_METADATA_KEY (dashboard/modules/job/common.py).
RAY_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
RAY_JOB_ID_KEY = "job_submission_id"


def _boot_id() -> str:
    """This kernel's identity (shared by its containers): where flock is the whole truth."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def ray_job_id() -> str | None:
    """The Ray job submission id when running as a `ray job submit` entrypoint, else None."""
    try:
        return str(json.loads(os.environ[RAY_JOB_CONFIG_ENV])["metadata"][RAY_JOB_ID_KEY])
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Owner:
    """Who holds a run directory, as its lock file records it."""

    host: str
    pid: int
    started: float  # time.time() of the claim
    heartbeat: float  # time.time() of the last refresh
    boot: str = ""  # the holder's kernel boot id
    job: str | None = None  # Ray job submission id

    @classmethod
    def me(cls, now: float) -> Owner:
        host = socket.gethostname()[:200]
        return cls(host=host, pid=os.getpid(), started=now, heartbeat=now, boot=_boot_id(), job=ray_job_id())

    def same_kernel(self) -> bool:
        ours = _boot_id()
        return self.boot == ours if self.boot and ours else self.host == socket.gethostname()

    def describe(self, now: float | None = None) -> str:
        age = max(0.0, (time.time() if now is None else now) - self.heartbeat)
        job = f" (Ray job {self.job})" if self.job else ""
        return (
            f"pid {self.pid} on host {self.host}{job}, started {_utc(self.started)}, "
            f"last heartbeat {_age(age)} ago"
        )

    def encode(self) -> bytes:
        text = json.dumps(asdict(self), separators=(",", ":"))
        return text.encode()[: RECORD_BYTES - 1].ljust(RECORD_BYTES - 1) + b"\n"

    @classmethod
    def decode(cls, data: bytes) -> Owner | None:
        try:
            raw = json.loads(data.decode())
            owner = cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})
        except (ValueError, TypeError, AttributeError):  # empty, torn or foreign content
            return None
        numbers = (owner.started, owner.heartbeat)
        if not isinstance(owner.pid, int) or not all(isinstance(x, int | float) for x in numbers):
            return None
        return owner


def _utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


class RunDirBusy(Exception):
    """The directory is held by a live run; the message names it (see `Owner.describe`)."""

    def __init__(self, directory: Path, owner: Owner | None, *, lapses_s: float | None = None):
        self.directory, self.owner = directory, owner
        if owner is None:
            text = "in use by a live run (its lock is held; the owner is not recorded yet)"
        else:
            text = f"in use by a live run: {owner.describe()}"
            if lapses_s is not None:  # seen only through its heartbeat: say when it would count as gone
                text += f" (if that run is dead, its lock lapses {_age(lapses_s)} after its last heartbeat)"
            elif owner.host == socket.gethostname() and owner.same_kernel() and not _pid_alive(owner.pid):
                text += " (that pid is gone, but a process it started still holds the lock)"
        super().__init__(text)

    def __reduce__(self):  # rebuilt with its message as worded here (it reads this host's processes)
        return _busy_again, (type(self), self.directory, self.owner, str(self))


def _busy_again(cls: type[RunDirBusy], directory: Path, owner: Owner | None, text: str) -> RunDirBusy:
    error = cls.__new__(cls)
    Exception.__init__(error, text)
    error.directory, error.owner = directory, owner
    return error


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):  # a zombie is dead, only not yet reaped
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] != "Z"
    return True


def _alive_elsewhere(owner: Owner, now: float, stale_after_s: float) -> bool:
    """Whether a record whose flock we could take still counts as a live holder: only a holder on
    another kernel (whose flock we may not see) with a fresh heartbeat does."""
    return not owner.same_kernel() and now - owner.heartbeat < stale_after_s


def _read_owner(fd: int, tries: int = 15) -> Owner | None:
    """The record, read through `fd`; retried briefly, since a holder may be writing it right now.
    (Never open and close the lock file by path in the holding process: on NFS, flock is a POSIX
    lock, and closing any descriptor of the file drops the process's lock.)"""
    for attempt in range(tries):
        owner = Owner.decode(os.pread(fd, 4 * RECORD_BYTES, 0))
        if owner is not None or attempt == tries - 1:
            return owner
        time.sleep(0.02)
    return None


def check_free(directory: str | Path, stale_after_s: float = STALE_AFTER_S) -> None:
    """RunDirBusy if a live run holds `directory`; writes nothing (no lock file is created).

    A look before the run's checks, so a refusal is quick; only `claim_run_dir` decides."""
    directory = Path(directory)
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # no lock file (or no directory): nobody holds it
        return
    try:
        try:  # shared: two lookers never block each other; a claimer retries past us
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held = False
        except BlockingIOError:
            held = True
        owner = _read_owner(fd, tries=15 if held else 3)
    finally:
        os.close(fd)
    if held:
        raise RunDirBusy(directory, owner)
    if owner is not None and _alive_elsewhere(owner, time.time(), stale_after_s):
        raise RunDirBusy(directory, owner, lapses_s=stale_after_s)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _locked_fd(path: Path) -> int | None:
    """A descriptor of `path` holding LOCK_EX, or None when another holder keeps it."""
    deadline = time.monotonic() + BUSY_RETRY_S
    while True:
        # O_CLOEXEC: the processes Ray starts from this one never inherit (and keep) the lock
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)
            continue
        if _same_file(fd, path):
            return fd
        os.close(fd)  # a releasing holder removed the file after we opened it: lock the new one


def _make_dirs(directory: Path) -> list[Path]:
    """mkdir -p, returning the directories made here (deepest last), for `RunLock.abandon`."""
    missing = [p for p in (directory, *directory.parents) if not p.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


def claim_run_dir(
    directory: str | Path,
    *,
    log: Callable[[str], None] = print,
    heartbeat_s: float = HEARTBEAT_S,
    stale_after_s: float = STALE_AFTER_S,
) -> RunLock:
    """Make `directory` (parents too) and hold its lock file; RunDirBusy if a live run holds it.

    A lock left by a run that is gone is taken over, and `log` gets one line naming that run."""
    directory = Path(directory)
    made = _make_dirs(directory)
    path = directory / LOCK_FILE
    fd = _locked_fd(path)
    if fd is None:
        check_free(directory, stale_after_s)  # names the holder (we hold nothing: reading is safe)
        fd = _locked_fd(path)  # released between the two looks
        if fd is None:
            raise RunDirBusy(directory, None)
    try:
        previous, now = _read_owner(fd, tries=3), time.time()
        if previous is not None and _alive_elsewhere(previous, now, stale_after_s):
            raise RunDirBusy(directory, previous, lapses_s=stale_after_s)
        owner = Owner.me(now)
        os.pwrite(fd, owner.encode(), 0)
        os.ftruncate(fd, RECORD_BYTES)  # anything longer that was there before
    except BaseException:
        os.close(fd)
        raise
    if previous is not None:
        log(f"took over the lock of {directory}: the run that held it is gone ({previous.describe(now)})")
    return RunLock(path, fd, owner, made).start_heartbeat(heartbeat_s)


class RunLock:
    """A held run directory: refreshes its heartbeat until `release()` (or the `with` block's end)."""

    def __init__(self, path: Path, fd: int, owner: Owner, made: list[Path]):
        self.path, self.owner = path, owner
        self._fd: int | None = fd
        self._made = made
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def start_heartbeat(self, every_s: float) -> RunLock:
        self._beat = threading.Thread(
            target=self._heartbeat, args=(self._fd, every_s), name="run-lock-heartbeat", daemon=True
        )
        self._beat.start()
        return self

    def _heartbeat(self, fd: int, every_s: float) -> None:
        """Rewrites the record in place (one pwrite of a fixed size: the lock file's inode must
        stay the one locked, so no write-and-rename); `release` joins this before closing `fd`."""
        while not self._stop.wait(every_s):
            owner = Owner(**{**asdict(self.owner), "heartbeat": time.time()})
            with contextlib.suppress(OSError):  # the storage went away: the run will say so itself
                os.pwrite(fd, owner.encode(), 0)
                self.owner = owner

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Stop the heartbeat, remove the lock file, drop the lock (idempotent).

        The file goes first, while still held: a claimer that opened it meanwhile sees, once it
        gets the lock, that the path no longer names its file, and claims the path anew."""
        if self._fd is None:
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            if _same_file(fd, self.path):
                self.path.unlink()
        os.close(fd)

    def abandon(self) -> None:
        """Release, then remove the directories the claim made, if they are still empty: a run
        refused after its claim leaves nothing behind."""
        self.release()
        for directory in reversed(self._made):
            with contextlib.suppress(OSError):
                directory.rmdir()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
