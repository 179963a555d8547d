"""The sandbox's seccomp filter, in the spirit of Docker's default profile, built with libseccomp.

Every system call is allowed but those a program has no use for and that widen the kernel's reach:
io_uring, userfaultfd, kernel keys, bpf, perf_event_open, ptrace and reading other processes'
memory, mounting and new mount APIs, new namespaces (unshare, setns, clone with a CLONE_NEW* flag;
clone3 answers ENOSYS so the C library falls back to clone, as under Docker), module and kexec
loading, clock setting, swap, reboot, quotas and handles by inode. Sockets: AF_UNIX, AF_INET and
AF_INET6, and AF_NETLINK with NETLINK_ROUTE only (what `getaddrinfo` and `if_nameindex` use); every
other family (AF_VSOCK, AF_PACKET, other netlink protocols, ...) is refused with EAFNOSUPPORT.
System calls of another architecture (the 32-bit entry on x86-64) kill the process (libseccomp's
default for a foreign architecture).

The filter is compiled once per process to classic BPF and handed to bubblewrap (`--seccomp FD`),
which loads it last, just before it executes the sandbox's command.
"""

from __future__ import annotations

import errno
import os
import threading

REFUSED = (
    # asynchronous I/O rings and user-handled page faults: large, often-exploited kernel surfaces
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    # kernel keyrings: shared by every process of a uid, so a channel between executions
    "keyctl",
    "add_key",
    "request_key",
    # eBPF, performance counters, other processes' memory
    "bpf",
    "perf_event_open",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "process_madvise",
    "pidfd_getfd",
    # mounts and namespaces
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "chroot",
    # the kernel itself, clocks, swap and accounting
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "name_to_handle_at",
    "open_by_handle_at",
    "lookup_dcookie",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    "nfsservctl",
    "vhangup",
    "iopl",
    "ioperm",
    "fanotify_init",
    "set_mempolicy_home_node",
    "move_pages",
    "mbind",
)
NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
ALLOWED_FAMILIES = (AF_UNIX, AF_INET, AF_INET6)
NETLINK_ROUTE = 0
AF_MAX = 64  # families past the kernel's own count are refused too

_lock = threading.Lock()
_compiled: list[bytes] = []


def seccomp_unavailable_reason() -> str | None:
    """None when the filter can be built here, else one line naming what is missing."""
    try:
        compiled_filter()
    except ImportError:
        return "the seccomp binding is missing (pip install pyseccomp; it needs libseccomp2)"
    except (OSError, RuntimeError) as exc:
        return f"the seccomp filter cannot be built here: {exc}"
    return None


def compiled_filter() -> bytes:
    """The filter as classic BPF, built once per process."""
    with _lock:
        if not _compiled:
            _compiled.append(_build())
        return _compiled[0]


def _build() -> bytes:
    import pyseccomp as sc  # a ctypes binding of libseccomp: imported only when a sandbox starts

    refuse = sc.ERRNO(errno.EPERM)
    rules = sc.SyscallFilter(sc.ALLOW)
    for name in REFUSED:
        try:
            rules.add_rule(refuse, name)
        except (OSError, ValueError, RuntimeError):
            continue  # a call this architecture or this libseccomp does not know: nothing to refuse
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")  # its flags sit in memory, out of the filter's reach
    for flag in NAMESPACE_FLAGS:
        rules.add_rule(refuse, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    no_family = sc.ERRNO(errno.EAFNOSUPPORT)
    for family in range(AF_MAX):
        if family not in (*ALLOWED_FAMILIES, AF_NETLINK):
            rules.add_rule(no_family, "socket", sc.Arg(0, sc.EQ, family))
    rules.add_rule(no_family, "socket", sc.Arg(0, sc.GE, AF_MAX))
    rules.add_rule(no_family, "socket", sc.Arg(0, sc.EQ, AF_NETLINK), sc.Arg(2, sc.NE, NETLINK_ROUTE))
    with os.fdopen(os.memfd_create("seccomp"), "w+b") as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()
