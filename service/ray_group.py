"""The Ray a run starts for itself runs outside the driver's process group.

A signal sent to a process group (what `timeout`, a shell's job control and service managers send:
`kill -TERM -PGID`) reaches every process in it. Ray's own processes (its GCS, raylet, dashboard,
and through the raylet every worker) would be in the driver's group and end on the SIGTERM that
asks the driver to stop after the current step: the driver would be left waiting for a GCS that is
gone, with no summary written. So while `ray.init` starts them, each is started as the leader of
a group of its own; the driver alone handles the signal, finishes the step, checkpoints, writes
its summary and ends Ray itself (`ray.shutdown`). Ray's processes still die with the driver if it
is killed outright: Ray ties them to it by the kernel (PR_SET_PDEATHSIG), not by the group.

Ray has no option for this: the class its process starter uses (`ray._private.services.
ConsolePopen`, a `subprocess.Popen`) is given `process_group=0` for the duration of the start.
Where a Ray release lacks it, the start goes on as before and `own_process_groups` says False.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator

POPEN_CLASS = "ConsolePopen"


@contextlib.contextmanager
def own_process_groups() -> Iterator[bool]:
    """Within the block, the processes Ray starts lead process groups of their own; yields whether
    it could arrange that."""
    try:
        services = importlib.import_module("ray._private.services")
    except ImportError:
        yield False
        return
    original = getattr(services, POPEN_CLASS, None)
    if not isinstance(original, type):
        yield False
        return

    class OwnGroupPopen(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("process_group", 0)
            super().__init__(*args, **kwargs)

    setattr(services, POPEN_CLASS, OwnGroupPopen)
    try:
        yield True
    finally:
        setattr(services, POPEN_CLASS, original)
