"""Running untrusted code (a completion, a command an environment runs for the policy) in isolation.

from rewards.sandbox import run_python
run_python("print(sum(range(10)))").stdout  # '45\\n'

Each execution gets fresh user, pid, net, ipc, uts, mount and cgroup namespaces (bubblewrap), a
read-only view of /usr and the interpreter, a private tmpfs work directory, an emptied environment,
rlimits, and its own pids (and memory) cgroup; the result's `status` says what became of it.
Pure: no Ray, no torch.
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
