"""Finding an environment class from the config: a bundled name or `module:Class` (an
`Environment`, or a SkyRL-gym environment class, which is wrapped: `rewards.env.skyrl`)."""

from __future__ import annotations

from rewards.env.base import Environment
from rewards.env.skyrl import is_skyrl_class, wrap_skyrl
from rewards.importing import import_attribute

# Bundled environments by name, imported only when named.
BUNDLED_ENVIRONMENTS = {
    "guess": "rewards.env.guess:GuessNumber",
    "python-tool": "rewards.env.python_tool:PythonTool",
    "chess-play": "rewards.env.chess_play:ChessPlay",
}


class EnvSpecError(ValueError):
    """An environment the config names that cannot be found or used (one line)."""


def load_environment(spec: str) -> type[Environment]:
    """The class `spec` names (a bundled name, or `module:Class`); EnvSpecError otherwise."""
    if not isinstance(spec, str) or not spec:
        raise EnvSpecError(f"task.env must be a bundled name or 'module:Class', got {spec!r}")
    path = BUNDLED_ENVIRONMENTS.get(spec, spec)
    if path.count(":") != 1:
        bundled = ", ".join(sorted(BUNDLED_ENVIRONMENTS))
        raise EnvSpecError(f"task.env {spec!r}: name a bundled environment ({bundled}) or 'module:Class'")
    obj = import_attribute(path, f"task.env {spec!r}", EnvSpecError)
    attr = path.split(":")[1]
    if not isinstance(obj, type):
        raise EnvSpecError(f"task.env {spec!r}: {attr!r} is a {type(obj).__name__}, not a class")
    if is_skyrl_class(obj):  # a SkyRL-gym environment: init(prompt) and step(action) -> dict
        return wrap_skyrl(obj)
    missing = [m for m in ("reset", "step") if not callable(getattr(obj, m, None))]
    if missing:
        raise EnvSpecError(f"task.env {spec!r}: {attr} has no {' or '.join(missing)} method")
    if not issubclass(obj, Environment):  # its stop, alphabet and the other defaults come from there
        raise EnvSpecError(
            f"task.env {spec!r}: {attr} does not derive from rewards.env.Environment "
            f"(class {attr}(Environment): ... gives it stop, alphabet and the other defaults)"
        )
    return obj
