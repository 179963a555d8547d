"""Running untrusted code (a completion, a command an environment runs for the policy) in isolation.

from rewards.sandbox import run_python
run_python("print(sum(range(10)))").stdout  # '45\\n'

Executions run in bubblewrap sandboxes: their own user, pid, net, ipc, uts, mount and cgroup
namespaces, a read-only view of /usr and the interpreter, private tmpfs work directory, /tmp and
/dev/shm, an emptied environment, rlimits, and pids (and memory) cgroups. By default each is a
child forked by a warm sandbox of the calling thread (`warm.py`: milliseconds, emptied and swept
between executions); `fresh=True` starts a sandbox for the one execution. The result's `status`
says what became of it. Pure: no Ray, no torch.
"""

from rewards.sandbox.result import (
    FAILED,
    KILLED,
    MEMORY,
    OK,
    OUTPUT_LIMIT,
    SANDBOX_ERROR,
    STATUSES,
    TIMEOUT,
    SandboxLimits,
    SandboxResult,
)
from rewards.sandbox.run import run_command, run_python, run_python_async, sandbox_unavailable_reason

__all__ = [
    "FAILED",
    "KILLED",
    "MEMORY",
    "OK",
    "OUTPUT_LIMIT",
    "SANDBOX_ERROR",
    "STATUSES",
    "TIMEOUT",
    "SandboxLimits",
    "SandboxResult",
    "run_command",
    "run_python",
    "run_python_async",
    "sandbox_unavailable_reason",
]
