"""The command line of one sandbox: a shell that joins the cgroups, then bubblewrap, then the program.

    sh -c LAUNCH    ->  writes its own pid into each cgroup.procs, then execs
    [prlimit]       ->  RLIMIT_NPROC, where the processes are capped by uid (`process_limit.py`)
    bwrap --args FD ->  new pid/net/ipc/uts/mount/cgroup namespaces, read-only system, private tmpfs,
                        the seccomp filter; its options come from a memfd, so /proc/1/cmdline inside
                        shows no host path but the interpreter's
    ENTER (as root) ->  gives the private directories to the slot's uid, then setpriv: that uid, no
                        capabilities, no new privileges, then the program (or the warm executor)

Where this process is root, bubblewrap runs as root without a user namespace and the program runs as
the sandbox slot's own unprivileged uid (`uid_slots.py`): it is never root outside, so the kernel's
knobs (/proc/sys, which is also bound read-only) and every file of root's are not its to write, and
RLIMIT_NPROC binds it. Otherwise (an unprivileged caller) bubblewrap makes a user namespace whose
uid 65534 is the caller's own uid outside.

The shell and bwrap start with an environment of PATH and LANG only; the program's environment is
set with --clearenv/--setenv. Nothing of the host's filesystem is visible but /usr (with the
merged-/usr links), the interpreter's prefixes and two files of /etc, all read-only; the work
directory, /tmp and /dev/shm are private tmpfs, /dev/mqueue a private mqueue, /dev itself read-only.
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
SANDBOX_UID = 65534  # the program's uid inside the user namespace of an unprivileged caller
PRIVATE_DIRS = ("/tmp", "/dev/shm", WORKDIR)
# /proc entries bound read-only over the fresh procfs (as Docker does): the kernel's knobs.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
# As root inside bwrap, just long enough to give the private directories to the slot's uid and
# become it: no capability is left and none can be gained (no_new_privs), before the program starts.
ENTER = (
    'u=$1; shift; chown "$u:$u" /tmp /dev/shm && chown -R "$u:$u" ' + WORKDIR + " && exec /usr/bin/setpriv "
    '--reuid="$u" --regid="$u" --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all -- "$@"'
)
ENTER_CAPS = ("CAP_CHOWN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")

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


def launcher_argv(procs_files: list[str], nproc: int | None, bwrap: list[str]) -> list[str]:
    """`sh -c LAUNCH`: join each cgroup (its cgroup.procs file), set RLIMIT_NPROC when `nproc` is
    given (bwrap itself runs as root, which the limit does not bind), then exec bwrap's argv."""
    limit = ["/usr/bin/prlimit", f"--nproc={nproc}:{nproc}", "--"] if nproc is not None else []
    return ["/bin/sh", "-c", LAUNCH, "launch", str(len(procs_files)), *procs_files, *limit, *bwrap]


def options_fd(options: list[str]) -> int:
    """A memfd holding bwrap's options NUL-separated, for `bwrap --args FD`."""
    return memfd("bwrap-args", b"".join(option.encode() + b"\0" for option in options))


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


def bwrap_options(
    *,
    limits: SandboxLimits,
    python: str,
    status_fd: int | None,
    files: dict[str, int],
    program_fd: int | None,
    seccomp_fd: int,
    program_path: str = PROGRAM,
    die_with_parent: bool = True,
    as_pid_1: bool = False,
    slot_uid: int | None = None,
) -> list[str]:
    """bwrap's options (handed over through `--args FD`); `files` maps work-directory names to
    readable fds (copied in by bwrap, then closed). `slot_uid`: this process is root and the
    program runs as that uid (no user namespace); None: an unprivileged caller's user namespace.
    `die_with_parent` kills the sandbox with the thread that started it (PR_SET_PDEATHSIG follows
    the thread): a warm sandbox outlives its starting thread and ends when its control pipe closes
    instead. `as_pid_1`: the command is the pid namespace's init (no bwrap reaper): nothing inside
    can signal it, and everything inside dies with it."""
    disk = str(limits.disk_mb << 20)
    args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup"]
    args += ["--new-session"] + (["--die-with-parent"] if die_with_parent else [])
    args += ["--as-pid-1"] if as_pid_1 else []
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    args += ["--hostname", "sandbox"]
    if slot_uid is None:
        args += ["--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    else:
        for cap in ENTER_CAPS:
            args += ["--cap-add", cap]
    args += system_binds()
    args += ["--proc", "/proc"]
    for knob in PROC_READ_ONLY:
        args += ["--ro-bind-try", knob, knob]
    args += ["--dev", "/dev"]
    for private in PRIVATE_DIRS:
        args += ["--size", disk, "--tmpfs", private]
    args += ["--mqueue", "/dev/mqueue", "--remount-ro", "/dev"]
    # After the private /tmp: an interpreter that lives under /tmp (a CI virtualenv) stays visible.
    made: set[str] = set()
    for root in interpreter_binds(python):
        for parent in reversed(PurePosixPath(root).parents[:-1]):  # traversable by the slot's uid
            if str(parent) not in made and str(parent) not in PRIVATE_DIRS:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", root, root]
    args += file_args(files)
    if program_fd is not None:
        args += ["--perms", "0444", "--ro-bind-data", str(program_fd), program_path]
    args += ["--remount-ro", "/", "--chdir", WORKDIR, "--clearenv"]
    for key, value in program_env(python).items():
        args += ["--setenv", key, value]
    return [*args, "--seccomp", str(seccomp_fd)]


def inner_command(command: list[str], slot_uid: int | None) -> list[str]:
    """What bwrap executes: the command itself, or (as root) ENTER, which becomes the slot's uid first."""
    if slot_uid is None:
        return command
    return ["/bin/sh", "-c", ENTER, "enter", str(slot_uid), *command]


def bwrap_argv(bwrap: str, args_fd: int, command: list[str], slot_uid: int | None) -> list[str]:
    return [bwrap, "--args", str(args_fd), "--", *inner_command(command, slot_uid)]


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
