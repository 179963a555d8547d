"""What a trial process and its parent agree on: how a trial is named and how it answers.

A trial is named 'package.module:function' and runs as `function(**kwargs)` in a process of its
own (`bench.isolated` starts it, directly or through a `bench.forkserver`); it prints its JSON-able
result on one line that starts with RESULT_PREFIX, which the parent looks for in its output.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

RESULT_PREFIX = "[bench-result] "


def resolve_target(target: str) -> Callable[..., Any]:
    """The function named 'package.module:function' (importing its module)."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"target must be 'package.module:function', got {target!r}")
    return getattr(importlib.import_module(module_name), attr)
