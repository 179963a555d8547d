"""The tasks: each one module of this package, holding its config class and its `Task`.

    task = build_task(cfg)      # a service.tasks.Task for the run's config

The registry is what the modules of this package define: every `Task` subclass with a
`config_class` of its own, under that config's `name`. The `task` section of the config (a variant
per task, told apart by `task.name`), the registry below and every list of task names derive from
it, so adding a task adds one module (docs/guides/adding-a-task.md).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

from service.tasks.base import RunSections, Task, TaskConfigBase
from service.tasks.code import CodeTask, CodeTaskConfig
from service.tasks.env import EnvTask, EnvTaskConfig
from service.tasks.fen import FenTask, FenTaskConfig
from service.tasks.move import MoveTask, MoveTaskConfig
from service.tasks.text import TextTask, TextTaskConfig
from trainer.config_base import tagged_union

DEFAULT_TASK = FenTask.name  # the task of a config whose `task` section names none


def _found_tasks() -> tuple[type[Task], ...]:
    """Every task the package's modules define, the default first, then by name; RuntimeError when
    two share a name."""
    found: dict[str, type[Task]] = {}
    for module in pkgutil.iter_modules(__path__):
        loaded = importlib.import_module(f"{__name__}.{module.name}")
        for _, cls in inspect.getmembers(loaded, inspect.isclass):
            if issubclass(cls, Task) and "config_class" in cls.__dict__ and cls.__module__ == loaded.__name__:
                if found.setdefault(cls.name, cls) is not cls:
                    raise RuntimeError(f"two tasks are named {cls.name!r}: {found[cls.name]} and {cls}")
    return tuple(sorted(found.values(), key=lambda task: (task.name != DEFAULT_TASK, task.name)))


TASK_TYPES: tuple[type[Task], ...] = _found_tasks()
TASKS: dict[str, type[Task]] = {task.name: task for task in TASK_TYPES}
TASK_NAMES: tuple[str, ...] = tuple(TASKS)

# The `task` section: one variant per task, by `task.name` (the default task when absent).
TaskConfig: Any = tagged_union("name", DEFAULT_TASK, *(task.config_class for task in TASK_TYPES))


def build_task(cfg: RunSections) -> Task:
    """The run's task, built from its config sections (ValueError, one line, when it cannot be)."""
    return TASKS[cfg.task.name].from_config(cfg)


__all__ = [
    "DEFAULT_TASK",
    "TASKS",
    "TASK_NAMES",
    "TASK_TYPES",
    "CodeTask",
    "CodeTaskConfig",
    "EnvTask",
    "EnvTaskConfig",
    "FenTask",
    "FenTaskConfig",
    "MoveTask",
    "MoveTaskConfig",
    "Task",
    "TaskConfig",
    "TaskConfigBase",
    "TextTask",
    "TextTaskConfig",
    "build_task",
]
