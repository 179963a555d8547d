"""What one sandboxed execution may use (`SandboxLimits`) and what came of it (`SandboxResult`)."""

from __future__ import annotations

from dataclasses import dataclass

OK = "ok"  # exited 0
FAILED = "failed"  # exited non-zero (an exception, a failed assert, sys.exit(1))
TIMEOUT = "timeout"  # past the wall-clock deadline, or past its CPU seconds (SIGXCPU)
MEMORY = "memory"  # killed by the memory cgroup, or died of MemoryError at the address-space limit
OUTPUT_LIMIT = "output_limit"  # wrote more than `output_bytes` to stdout or stderr: killed there
KILLED = "killed"  # ended by a signal for another reason (a segfault, its own kill)
SANDBOX_ERROR = "sandbox_error"  # the isolation itself could not be set up: nothing was judged

STATUSES: tuple[str, ...] = (OK, FAILED, TIMEOUT, MEMORY, OUTPUT_LIMIT, KILLED, SANDBOX_ERROR)


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Limits of one execution. Every one binds the whole execution: the program and whatever it starts."""

    wall_s: float = 5.0  # wall clock from start to kill, sandbox start included
    cpu_s: float = 5.0  # RLIMIT_CPU of each process (SIGXCPU, then SIGKILL one second later)
    memory_mb: int = 512  # the memory cgroup's limit (RAM + swap + the tmpfs pages it writes)
    processes: int = 16  # the pids cgroup's cap: processes and threads together
    file_size_mb: int = 16  # RLIMIT_FSIZE: the largest file it may write
    open_files: int = 64  # RLIMIT_NOFILE
    output_bytes: int = 65536  # per stream; more is `output_limit`
    disk_mb: int = 64  # size of each private tmpfs (the work directory, /tmp, /dev/shm)
    process_limit: str = "auto"  # how `processes` binds: auto, cgroup_v1, cgroup_v2 or uid (process_limit.py)

    def __post_init__(self) -> None:
        from rewards.sandbox.process_limit import check_method

        check_method(self.process_limit)
        for name in ("wall_s", "cpu_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("memory_mb", "processes", "file_size_mb", "open_files", "output_bytes", "disk_mb"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SandboxLimits.{name} must be a positive int, got {value!r}")
        if self.processes < 2:
            raise ValueError("SandboxLimits.processes must be >= 2 (the sandbox's init and the program)")


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """The outcome of one execution; every outcome of the program is a status, never an exception."""

    status: str  # one of STATUSES
    exit_code: int | None  # the program's exit status; None when killed by a signal or never started
    stdout: str  # decoded UTF-8 (invalid bytes replaced), at most `output_bytes` bytes of it
    stderr: str
    seconds: float  # wall clock of the whole execution, sandbox start and clean-up included
    detail: str = ""  # one line: why, for a status other than ok
    process_limit: str = (
        ""  # how its processes were capped: cgroup_v1, cgroup_v2 or uid ("" when never started)
    )

    @property
    def ok(self) -> bool:
        return self.status == OK
