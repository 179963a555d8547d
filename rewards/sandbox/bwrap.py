"""The command line of one execution: a shell that joins the cgroups, then bubblewrap, then prlimit.

    sh -c LAUNCH  ->  writes its own pid into each cgroup.procs, then execs
    bwrap ...     ->  new user/pid/net/ipc/uts/mount/cgroup namespaces, read-only system, private tmpfs
    prlimit ...   ->  CPU seconds, address space, file size, open files, core 0, then execs the program

The shell and bwrap start with an environment of PATH and LANG only (the sandbox can read bwrap's
own environment at /proc/1/environ); the program's environment is set with --clearenv/--setenv.
Nothing of the host's filesystem is visible but /usr (with the merged-/usr links), the interpreter's
prefixes and two files of /etc, all read-only; the work directory, /tmp and /dev/shm are private tmpfs.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path, PurePosixPath

from rewards.sandbox.result import SandboxLimits

WORKDIR = "/sandbox"  # the program's cwd: a fresh tmpfs holding the `files`
PROGRAM = "/program/main.py"  # run_python's source, read-only, outside the work directory
LAUNCHER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
SANDBOX_UID = 65534  # nobody, inside the user namespace

# $1 is how many cgroup.procs files follow; the shell joins each before anything can fork.
LAUNCH = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'
)
SYSTEM_ETC = ("/etc/ld.so.cache", "/etc/localtime")


def interpreter_binds(python: str) -> list[str]:
    """The prefixes an interpreter needs that /usr does not already hold (a venv, pyenv, conda)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots.add(str(Path(python).parent.parent))
    roots.add(str(Path(os.path.realpath(python)).parent.parent))
    kept: list[str] = []
    for root in sorted(os.path.realpath(r) for r in roots):
        if root in ("/", "/usr") or root.startswith("/usr/"):
            continue
        if any(root == k or root.startswith(k + "/") for k in kept):
            continue
        kept.append(root)
    return kept


def system_binds() -> list[str]:
    """/usr read-only, and /bin, /lib, /lib64, /sbin as the links (or directories) they are on the host."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for path in SYSTEM_ETC:
        args += ["--ro-bind-try", path, path]
    return args


def memfd(name: str, data: bytes) -> int:
    """A readable memfd holding `data`, at offset 0 (close-on-exec: only pass_fds reach the launcher)."""
    fd = os.memfd_create(name)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def launcher_argv(procs_files: list[str], bwrap: list[str]) -> list[str]:
    """`sh -c LAUNCH`: join each cgroup (its cgroup.procs file), then exec bwrap's argv."""
    return ["/bin/sh", "-c", LAUNCH, "launch", str(len(procs_files)), *procs_files, *bwrap]


def tool(name: str) -> str:
    return shutil.which(name, path="/usr/bin:/bin:/usr/local/bin") or name


def cpu_seconds(limits: SandboxLimits) -> int:
    """RLIMIT_CPU's soft limit: whole seconds, rounded up."""
    return max(1, int(-(-limits.cpu_s // 1)))


def check_file_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if str(path) in ("", ".") or path.is_absolute() or ".." in path.parts:
        raise ValueError(f"sandbox file names are relative paths inside the work directory, got {name!r}")
    return path


def bwrap_argv(
    bwrap: str,
    command: list[str],
    *,
    limits: SandboxLimits,
    python: str,
    status_fd: int | None,
    files: dict[str, int],
    program_fd: int | None,
    address_space_mb: int | None,
    program_path: str = PROGRAM,
    die_with_parent: bool = True,
    as_pid_1: bool = False,
) -> list[str]:
    """bwrap's argv; `files` maps work-directory names to readable fds (copied in by bwrap, then closed).
    Without `address_space_mb` the command runs without prlimit (the warm executor sets each child's).
    `die_with_parent` kills the sandbox with the thread that started it (PR_SET_PDEATHSIG follows the
    thread): a warm sandbox outlives its starting thread and ends when its control pipe closes instead.
    `as_pid_1`: the command is the pid namespace's init (no bwrap reaper): nothing inside can signal
    it, and everything inside dies with it."""
    disk = str(limits.disk_mb << 20)
    args = [bwrap, "--unshare-all", "--new-session"] + (["--die-with-parent"] if die_with_parent else [])
    args += ["--as-pid-1"] if as_pid_1 else []
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
    args += ["--unshare-user", "--disable-userns"]  # --unshare-all only tries a user namespace as root
    args += system_binds()
    args += ["--proc", "/proc", "--dev", "/dev"]
    for private in ("/tmp", "/dev/shm", WORKDIR):
        args += ["--size", disk, "--tmpfs", private]
    # After the private /tmp: an interpreter that lives under /tmp (a CI virtualenv) stays visible.
    for root in interpreter_binds(python):
        args += ["--ro-bind", root, root]
    args += file_args(files)
    if program_fd is not None:
        args += ["--ro-bind-data", str(program_fd), program_path]
    args += ["--remount-ro", "/", "--chdir", WORKDIR, "--clearenv"]
    for key, value in program_env(python).items():
        args += ["--setenv", key, value]
    if address_space_mb is None:
        return [*args, "--", *command]
    return [*args, "--", *prlimit_argv(limits, address_space_mb), "--", *command]


def file_args(files: dict[str, int]) -> list[str]:
    """bwrap's arguments that copy each fd of `files` into the work directory, making parents first."""
    args: list[str] = []
    made: set[str] = set()
    for name, fd in files.items():
        path = check_file_name(name)
        for parent in reversed(path.parents[:-1]):
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--dir", f"{WORKDIR}/{parent}"]
        args += ["--file", str(fd), f"{WORKDIR}/{path}"]
    return args


def program_env(python: str) -> dict[str, str]:
    """The program's whole environment (bwrap starts it from an empty one)."""
    return {
        "PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": WORKDIR,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONPATH": WORKDIR,
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def prlimit_argv(limits: SandboxLimits, address_space_mb: int) -> list[str]:
    """prlimit with CPU seconds, address space, file size, open files and no core dump."""
    cpu = cpu_seconds(limits)
    return [
        "/usr/bin/prlimit",
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={address_space_mb << 20}",
        f"--fsize={limits.file_size_mb << 20}",
        f"--nofile={limits.open_files}",
        "--core=0",
    ]
