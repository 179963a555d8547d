"""Keys that moved to the task that reads them, still read where configs of earlier versions wrote
them: a `--config` file, a `--set` override, a run directory's config.yaml.

    data.source, data.path                          -> task.source, task.path (the fen task)
    data.min_plies, data.max_plies, data.natural    -> task.* (the fen and move tasks)
    reward.validity_weight, similarity_weight,
    exact_weight, cache_size                        -> task.* (the fen task)

Written in its old place, a key wins over the same key in `task`. For a task that does not read it,
a key at its old default is dropped (a resolved config.yaml held every key) and any other value is
refused in one line naming where the key is now and which tasks read it. A `task` section of the
time before its variants (every key of every task) keeps the keys of its own task.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rewards import FenRewardConfig
from service.tasks import DEFAULT_TASK, TASKS


class Moved(NamedTuple):
    old_default: Any
    readers: tuple[str, ...]  # the tasks that read it now, as `task.<leaf>`


_FEN_REWARD = FenRewardConfig()
MOVED: dict[str, Moved] = {
    "data.source": Moved("generated", ("fen",)),
    "data.path": Moved(None, ("fen",)),
    "data.min_plies": Moved(1, ("fen", "move")),
    "data.max_plies": Moved(4, ("fen", "move")),
    "data.natural": Moved(False, ("fen", "move")),
    **{f"reward.{key}": Moved(getattr(_FEN_REWARD, key), ("fen",)) for key in FenRewardConfig.model_fields},
}

# The keys of the `task` section before it had variants: a resolved config.yaml of that time holds
# all of them, and the ones its task never read are dropped when it is loaded again.
_FLAT_TASK_KEYS = ("path", "eval_path", "prompt_key", "target_key", "stop", "engine", "train_positions")


def moved_override(key: str) -> str:
    """Where a dotted override key is now (`data.min_plies` -> `task.min_plies`); others as given."""
    return f"task.{key.partition('.')[2]}" if key in MOVED else key


def moved_keys(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with each moved key taken from its old section into `task` (ValueError, one line,
    for a key its task does not read at a value other than its old default)."""
    task = config.get("task") or {}
    if hasattr(task, "model_dump"):
        task = task.model_dump()
    elif not isinstance(task, dict):  # not a section: validation names the key and what it takes
        return config
    task = dict(task)
    name = task.get("name", DEFAULT_TASK)
    out, moved = dict(config), False
    for section in dict.fromkeys(key.partition(".")[0] for key in MOVED):
        old = config.get(section)
        if not isinstance(old, dict) or not any(f"{section}.{k}" in MOVED for k in old):
            continue
        for leaf, value in old.items():
            key = f"{section}.{leaf}"
            if key not in MOVED:
                continue
            readers = MOVED[key].readers
            default = MOVED[key].old_default
            if name in readers and (leaf not in task or value != default):
                task[leaf] = value
            elif name not in readers and value != default:
                tasks = " and ".join(readers)
                only = "task" if len(readers) == 1 else "tasks"
                raise ValueError(
                    f"{key} is now task.{leaf}, read by the {tasks} {only} only; task.name is {name!r}"
                )
        out[section] = {k: v for k, v in old.items() if f"{section}.{k}" not in MOVED}
        moved = True
    if all(k in task for k in _FLAT_TASK_KEYS) and name in TASKS:
        own = TASKS[name].config_class.model_fields
        task = {k: v for k, v in task.items() if k in own or k not in _FLAT_TASK_KEYS}
        moved = True
    return {**out, "task": task} if moved else config
