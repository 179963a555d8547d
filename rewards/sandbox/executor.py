"""The program a warm sandbox runs: it forks one child per execution, inside the sandbox.

This file is not imported by the service: `warm.py` binds its source into a bubblewrap sandbox
as /program/executor.py and runs it there with the sandbox's interpreter (standard library only).
It reads requests on fd 0 and answers on fd 1, one 4-byte big-endian length and a JSON object
each way. For every request it:

- empties the private directories (the work directory, /tmp, /dev/shm), writes the request's
  files, and forks a child that takes a session of its own, the request's rlimits, fresh stdio
  (stdin from a memfd, stdout and stderr to pipes) and the work directory, then runs the source
  as `__main__` (or execs the request's argv);
- reads the child's output up to the cap and until the deadline, then kills what is left in the
  sandbox's pid namespace (this process is its pid 1, so double-forked daemons come back to it),
  removes SysV IPC objects, empties the directories again, and answers
  {"exit", "signal", "why", "stdout", "stderr", "clean"}.

As the namespace's init it cannot be signalled from inside (the kernel drops those signals), and
it makes itself non-dumpable, so a child (same uid) cannot ptrace it or open its /proc files.
"""

import atexit
import builtins
import ctypes
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
IN_FD, OUT_FD = 10, 11  # the control channel, moved off 0 and 1
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
        chunk = os.read(IN_FD, left)
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


def _remove(path):
    """Remove a file or a tree the program made, whatever modes it set on it."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
            for entry in os.listdir(path):
                _remove(os.path.join(path, entry))
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass


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
    for entry in os.listdir(place):
        path = os.path.join(place, entry)
        if path not in kept:
            _remove(path)
            clean = clean and not os.path.lexists(path)
        elif os.path.isdir(path) and not os.path.islink(path) and not os.path.ismount(path):
            clean = _empty(path, kept) and clean
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


def child(req, stdin, out_w, err_w):
    """In the forked child: isolate, limit, run; never returns."""
    code = 1
    try:
        os.setsid()
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc stays readable to itself
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")  # the memory cgroup's OOM killer takes the program, not the executor
        except OSError:
            pass
        for fd, target in ((stdin, 0), (out_w, 1), (err_w, 2)):
            os.dup2(fd, target)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        set_limits(req)
        os.chdir(WORKDIR)
        if req.get("argv"):
            os.execvpe(req["argv"][0], req["argv"], dict(os.environ))
        code = run_source(req["source"])
    except BaseException as exc:  # noqa: BLE001 - an exec that failed, a limit that could not be set
        try:
            os.write(2, f"{type(exc).__name__}: {exc}\n".encode())
        except OSError:
            pass
        code = 127 if req.get("argv") else 1
    os._exit(code)


def pump(pid, out_r, err_r, deadline, cap):
    """Read stdout and stderr until the child exits (then what is left), the deadline, or the cap."""
    bufs = {out_r: bytearray(), err_r: bytearray()}
    for fd in bufs:
        os.set_blocking(fd, False)
    pidfd = os.pidfd_open(pid)
    why = None
    with selectors.DefaultSelector() as selector:
        for fd in (out_r, err_r, pidfd):
            selector.register(fd, selectors.EVENT_READ)
        exited = False
        while not exited and why is None:
            left = deadline - time.monotonic()
            if left <= 0:
                why = "timeout"
                break
            for key, _ in selector.select(left):
                if key.fd == pidfd:
                    exited = True
                    continue
                why = why or _drain(key.fd, bufs[key.fd], cap, selector)
        if exited and why is None:
            for fd in bufs:
                why = why or _drain(fd, bufs[fd], cap, None)
    os.close(pidfd)
    return bytes(bufs[out_r][:cap]), bytes(bufs[err_r][:cap]), why


def _drain(fd, buf, cap, selector):
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                if selector is not None:
                    selector.unregister(fd)
                return None
            buf += chunk
            if len(buf) > cap:
                return "output_limit"
    except BlockingIOError:
        return None


def execute(req):
    began = time.monotonic()
    clean = wipe()
    write_files(req.get("files") or {})
    stdin = stdin_fd(req.get("stdin") or "")
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        child(req, stdin, out_w, err_w)
    for fd in (stdin, out_w, err_w):
        os.close(fd)
    out, err, why = pump(pid, out_r, err_r, began + req["wall_s"], req["output_bytes"])
    if why is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _, status = os.waitpid(pid, 0)
    os.close(out_r)
    os.close(err_r)
    swept = sweep()
    clear_ipc()
    clean = wipe() and clean and swept
    return {
        "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "why": why,
        "stdout": out.decode("utf-8", "replace"),
        "stderr": err.decode("utf-8", "replace"),
        "clean": clean,
    }


def main():
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans come back here even when not pid 1
    os.dup2(0, IN_FD)
    os.dup2(1, OUT_FD)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdout.flush()
    KEPT.update({place: _keep(place) for place in PRIVATE})
    send({"ready": True, "clean": wipe()})
    while (req := recv()) is not None:
        send(execute(req))


if __name__ == "__main__":
    main()
