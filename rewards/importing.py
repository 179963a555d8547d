"""Finding an object a config names as `module:attribute.path` (a user reward, an environment)."""

from __future__ import annotations

import importlib
from typing import Any


def import_attribute(spec: str, what: str, error: type[ValueError]) -> Any:
    """The object `spec` (`module:attr.path`) names; `error`, one line starting with `what`, when
    its module cannot be imported or lacks the attribute."""
    module_name, attr_path = spec.split(":")
    try:
        obj = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module's own code failing at import
        raise error(f"{what}: cannot import module {module_name!r} ({type(exc).__name__}: {exc})") from exc
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise error(f"{what}: {module_name!r} has no attribute {attr_path!r}")
        obj = getattr(obj, part)
    return obj
