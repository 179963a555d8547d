"""The program a warm sandbox runs: a zygote that never holds a program, forking one child per execution.

This file is not imported by the service: `warm.py` binds its source into a bubblewrap sandbox
as /program/executor.py and runs it there with the sandbox's interpreter (standard library only).
Frames on the control channel are a 4-byte big-endian length and a JSON object. For each request:

- the host sends a header (the limits, and the length of the body that follows it); this process
  reads the header only, empties the private directories (the work directory, /tmp, /dev/shm) and
  forks a child;
- the child reads the body (the source or argv, stdin and files) itself, writes the files, tells
  this process it has read it, takes a session of its own, the request's rlimits, stdin from a memfd
  and stdout and stderr to the two pipes the host reads (never this process), and runs the source
  as `__main__` (or execs the argv);
- until the child exits, the deadline passes or the host sends a stop frame (output past its cap),
  this process waits; then it kills what is left in the sandbox's pid namespace (it is its pid 1, so
  double-forked daemons come back to it), removes SysV IPC objects and POSIX message queues, empties
  the directories again, and answers {"exit", "signal", "why", "clean", "read"}.

So no program's source, input or output ever passes through this process's memory, and each
child starts from the same pristine state. The namespace's init ignores every signal (the kernel
then drops what a program sends it), and it makes itself non-dumpable, so a child (same uid)
cannot ptrace it or open its /proc files.
"""

import atexit
import builtins
import ctypes
import fcntl
import io
import json
import linecache
import os
import resource
import selectors
import signal
import stat
import struct
import sys
import time
import types

WORKDIR = "/sandbox"
PROGRAM = "/program/main.py"
PRIVATE = (WORKDIR, "/tmp", "/dev/shm")
# Moved to numbers of their own at start: the control channel (given as 0 and 1) and the write ends
# of the pipes the host reads the program's output from (given by number in argv).
IN_FD, OUT_FD, STDOUT_FD, STDERR_FD = 100, 101, 102, 103
MQUEUE = "/dev/mqueue"
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
IPC_RMID = 0
KEPT = {}  # private directory -> the paths bubblewrap made in it (filled at start)
libc = ctypes.CDLL(None, use_errno=True)
ME = os.getpid()


def recv():
    header = _read_exact(4)
    if header is None:
        return None
    body = _read_exact(struct.unpack(">I", header)[0])
    return None if body is None else json.loads(body)


def _read_exact(n):
    chunks, left = [], n
    while left:
        chunk = os.read(IN_FD, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send(obj):
    body = json.dumps(obj).encode()
    view = memoryview(struct.pack(">I", len(body)) + body)
    while view:
        view = view[os.write(OUT_FD, view) :]


def remove_at(top, name):
    """Remove `name` in the directory open as `top`, however deep its tree and whatever modes the
    program set: one directory open at a time (no path is ever longer than a name), climbing back
    up through "..", never following a symbolic link."""
    try:
        if not stat.S_ISDIR(os.stat(name, dir_fd=top, follow_symlinks=False).st_mode):
            os.unlink(name, dir_fd=top)
            return
        os.chmod(name, stat.S_IRWXU, dir_fd=top)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
    except OSError:
        return
    depth = 0
    while True:
        sub = _clear_files(fd)
        if sub is not None:
            try:
                os.chmod(sub, stat.S_IRWXU, dir_fd=fd)
                below = os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                os.close(fd)
                return
            os.close(fd)
            fd, depth = below, depth + 1
            continue
        inode = os.fstat(fd).st_ino
        if depth == 0:
            os.close(fd)
            try:
                os.rmdir(name, dir_fd=top)
            except OSError:
                pass
            return
        above = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd, depth = above, depth - 1
        with os.scandir(fd) as entries:
            emptied = next((e.name for e in entries if e.inode() == inode), None)
        if emptied is not None:
            try:
                os.rmdir(emptied, dir_fd=fd)
            except OSError:
                os.close(fd)
                return


def _clear_files(fd):
    """Unlink every entry of the directory `fd` that is not a directory; the first directory's name, or None."""
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                return entry.name
            try:
                os.unlink(entry.name, dir_fd=fd)
            except OSError:
                pass
    return None


def _keep(place):
    """What bubblewrap made in a private directory before any program ran (the mount point of an
    interpreter under /tmp, its parents): a set of paths, mount points not descended into."""
    kept = set()
    for entry in os.listdir(place):
        path = os.path.join(place, entry)
        kept.add(path)
        if os.path.isdir(path) and not os.path.islink(path) and not os.path.ismount(path):
            kept |= _keep(path)
    return kept


def _empty(place, kept):
    """Remove what a program left in `place`, keeping bubblewrap's own entries; True when only those remain."""
    clean = True
    fd = os.open(place, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for entry in os.listdir(fd):
            path = os.path.join(place, entry)
            if path not in kept:
                remove_at(fd, entry)
                clean = clean and not os.path.lexists(path)
            elif os.path.isdir(path) and not os.path.islink(path) and not os.path.ismount(path):
                clean = _empty(path, kept) and clean
    finally:
        os.close(fd)
    return clean


def wipe():
    """Empty the private directories; True when nothing but what bubblewrap made is left."""
    clean = True
    for place in PRIVATE:
        try:
            os.chmod(place, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
            clean = _empty(place, KEPT[place]) and clean
        except OSError:
            clean = False
    return clean


def clear_ipc():
    """Remove the SysV shared memory, message queues and semaphores an execution made."""
    for kind, remove in (
        ("shm", lambda i: libc.shmctl(i, IPC_RMID, None)),
        ("msg", lambda i: libc.msgctl(i, IPC_RMID, None)),
        ("sem", lambda i: libc.semctl(i, 0, IPC_RMID)),
    ):
        try:
            lines = open("/proc/sysvipc/" + kind).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            remove(int(line.split()[1]))


def clear_mqueues():
    """Remove the POSIX message queues an execution made (the sandbox's own mqueue mount lists them)."""
    try:
        for name in os.listdir(MQUEUE):
            try:
                os.unlink(os.path.join(MQUEUE, name))
            except OSError:
                pass
        return not os.listdir(MQUEUE)
    except OSError:
        return True  # no mqueue mount: message queues cannot be named, nor listed


def others():
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, ME)]


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def sweep():
    """SIGKILL every process of the namespace but its init and this one, until none is left."""
    for _ in range(2000):
        pids = others()
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()
        time.sleep(0.0005)
    return not others()


def write_files(files):
    for name, text in files.items():
        path = os.path.join(WORKDIR, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def stdin_fd(text):
    fd = os.memfd_create("stdin")
    data = memoryview(text.encode("utf-8", "surrogateescape"))
    while data:
        data = data[os.write(fd, data) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def set_limits(req):
    cpu = req["cpu_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (req["address_space"], req["address_space"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (req["file_size"], req["file_size"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (req["open_files"], req["open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_source(source):
    """Run `source` as a fresh interpreter would run /program/main.py; returns its exit code."""
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    sys.argv = [PROGRAM]  # sys.path is already [/program, /sandbox, ...], as for python /program/main.py
    main = types.ModuleType("__main__")
    main.__file__, main.__builtins__ = PROGRAM, builtins
    sys.modules["__main__"] = main
    lines = source.splitlines(True)
    linecache.cache[PROGRAM] = (len(source), None, lines, PROGRAM)
    code = 0
    try:
        exec(compile(source, PROGRAM, "exec"), main.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException as exc:  # noqa: BLE001 - reported as a fresh interpreter would report it
        exc = exc.with_traceback(exc.__traceback__.tb_next or exc.__traceback__)  # from the program's frame
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()  # wait for non-daemon threads, as interpreter exit does
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed or broken stream at exit is not the executor's
            pass
    return code


def _exit_code(value):
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def restore_signals():
    """A fresh interpreter's dispositions: default for all, Python's own for SIGINT, SIGPIPE, SIGXFSZ."""
    for sig in signal.valid_signals():
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for ignored in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(ignored, signal.SIG_IGN)


def ignore_signals():
    """Every signal this process can ignore is ignored (SIGCHLD stays: ignoring it would reap children)."""
    for sig in signal.valid_signals():
        if sig != signal.SIGCHLD:
            try:
                signal.signal(sig, signal.SIG_IGN)
            except (OSError, ValueError, RuntimeError):
                pass


def child(header, ack):
    """In the forked child: read the body, set up, limit, run; never returns."""
    code = 127
    argv = None
    try:
        body = _read_exact(header["body"])
        req = json.loads(body) if body is not None else {}
        argv = req.get("argv")
        write_files(req.get("files") or {})
        stdin = stdin_fd(req.get("stdin") or "")
        os.write(ack, b"k")
        os.close(ack)
        restore_signals()
        os.setsid()
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc stays readable to itself
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")  # the memory cgroup's OOM killer takes the program, not the executor
        except OSError:
            pass
        for fd, target in ((stdin, 0), (STDOUT_FD, 1), (STDERR_FD, 2)):
            os.dup2(fd, target)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        set_limits(header)
        os.chdir(WORKDIR)
        if argv:
            os.execvpe(argv[0], argv, dict(os.environ))
        code = run_source(req["source"])
    except BaseException as exc:  # noqa: BLE001 - an exec that failed, a limit that could not be set
        try:
            os.write(2, f"{type(exc).__name__}: {exc}\n".encode())
        except OSError:
            pass
        code = 127 if argv else 1
    os._exit(code)


def wait_for(pid, ack, deadline):
    """Wait for the child to exit; (why it was stopped early or None, whether it read its body)."""
    pidfd = os.pidfd_open(pid)
    read = False
    why = None
    with selectors.DefaultSelector() as selector:
        selector.register(pidfd, selectors.EVENT_READ)
        selector.register(ack, selectors.EVENT_READ)
        exited = False
        while not exited and why is None:
            left = deadline - time.monotonic()
            if left <= 0:
                why = "timeout"
                break
            for key, _ in selector.select(left):
                if key.fd == pidfd:
                    exited = True
                elif key.fd == ack:
                    read = os.read(ack, 1) == b"k"
                    selector.unregister(ack)
                    if read:  # the body is consumed: what comes on the channel now is the host's
                        selector.register(IN_FD, selectors.EVENT_READ)
                elif key.fd == IN_FD:
                    frame = recv()
                    why = "output_limit" if frame is not None else "host_gone"
    os.close(pidfd)
    return why, read


def execute(header):
    began = time.monotonic()
    clean = wipe()
    ack_r, ack_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ack_r)
        child(header, ack_w)
    os.close(ack_w)
    why, read = wait_for(pid, ack_r, began + header["wall_s"])
    os.close(ack_r)
    if why is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _, status = os.waitpid(pid, 0)
    swept = sweep()
    clear_ipc()
    queues = clear_mqueues()
    clean = wipe() and clean and swept and queues
    return {
        "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "why": why,
        "clean": clean,
        "read": read,
    }


def main():
    ignore_signals()
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans come back here even when not pid 1
    given = (0, 1, *map(int, sys.argv[1:3]))
    copies = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 200) for fd in given]  # clear of every target
    for fd in given[2:]:
        os.close(fd)
    for copy, kept in zip(copies, (IN_FD, OUT_FD, STDOUT_FD, STDERR_FD), strict=True):
        os.dup2(copy, kept, inheritable=False)
        os.close(copy)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdout.flush()
    KEPT.update({place: _keep(place) for place in PRIVATE})
    send({"ready": True, "clean": wipe() and clear_mqueues()})
    while (header := recv()) is not None:
        if header.get("stop"):
            continue  # a stop that arrived after its execution had ended
        answer = execute(header)
        send(answer)
        if not answer["read"]:
            return  # the channel may hold the rest of a body: the host replaces this sandbox


if __name__ == "__main__":
    main()
