"""Ray's own output on the driver's console: what a user must act on stays, the chatter goes.

Two sources reach the driver's terminal or job log:
- the driver's `ray` loggers (`ray.init`'s "Started a local Ray instance", the note that token
  auth is on): `ray.init(logging_level=WARNING)` drops the INFO lines, a filter the rest below;
- the lines of every worker process, forwarded by Ray (`log_to_driver`). A filter in front of
  Ray's printer drops everything from Ray Train's own bookkeeping actors (`RAY_TRAIN_ACTORS`:
  their warnings and tracebacks are about Ray's internals, e.g. a State API lookup that fails
  when several Ray clusters share a machine; a run that fails says why in its summary) and the
  lines of the other processes that match `NOISE`. Everything else (our workers' warnings and
  tracebacks, the raylet's out-of-memory kills) is printed as before, around the live display.

`--verbose` installs none of this. The hook into Ray's printer uses Ray's private dispatcher;
if a Ray release moves it, the filter is not installed and Ray prints everything, as before.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

# Ray Train's controller-side actors: nothing they print asks anything of the user.
RAY_TRAIN_ACTORS = frozenset({"TrainController", "PlacementGroupCleaner", "PreemptionWatcher"})

# Lines from the other worker processes that never ask anything of the user.
NOISE: tuple[re.Pattern[str], ...] = tuple(
    re.compile(pattern)
    for pattern in (
        # Ray Train's INFO line for each ray.train.report (one per checkpoint), from the workers.
        r"Reporting training result \d+",
    )
)

# Driver log records that only say all is as it should be.
_DRIVER_NOISE = (
    "Token authentication is enabled for this Ray cluster",  # the embedded cluster turned auth on
)
_RAY_PRINTER = "ray_print_logs"  # the name Ray registers its worker-line printer under


# Our workers' informational lines (the placement decision): shown unless `--quiet`.
INFO_LINE = re.compile(r"^\[(placement)\] ")


def is_noise(line: str) -> bool:
    return any(pattern.search(line) for pattern in NOISE)


def kept_lines(data: dict[str, Any], *, quiet: bool = False) -> list[str]:
    """The lines of one forwarded batch a user should see (with `quiet`, not our info lines)."""
    if data.get("actor_name") in RAY_TRAIN_ACTORS:
        return []
    return [
        line for line in data.get("lines", []) if not is_noise(line) and not (quiet and INFO_LINE.match(line))
    ]


class _DriverNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in _DRIVER_NOISE)


def quiet_driver_loggers() -> None:
    """Before ray.init: drop the driver's own reassuring Ray log records."""
    logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(_DriverNoise())


def filter_worker_lines(around: Callable[[], AbstractContextManager[None]], *, quiet: bool = False) -> bool:
    """After ray.init: drop noise from forwarded worker lines (with `quiet`, our info lines too);
    print the rest inside `around()`.

    Returns False (and changes nothing) when Ray's printer is not where this Ray version keeps it.
    """
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher
    except ImportError:
        return False
    printers = dict(getattr(dispatcher, "handlers", []))
    printer = printers.get(_RAY_PRINTER)
    if printer is None:
        return False

    def print_kept(data: dict[str, Any]) -> None:
        kept = kept_lines(data, quiet=quiet)
        if kept:
            with around():
                printer({**data, "lines": kept})

    dispatcher.remove_handler(_RAY_PRINTER)
    dispatcher.add_handler(_RAY_PRINTER, print_kept)
    return True
