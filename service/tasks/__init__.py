"""The task registry: `task.name` in the config picks one; adding a task adds a file here.

task = build_task(cfg)      # a service.tasks.Task for the run's config
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.tasks.base import Task
from service.tasks.fen import FenTask
from service.tasks.move import MoveTask
from service.tasks.text import TextTask

if TYPE_CHECKING:
    from service.config import ServiceConfig

TASKS: dict[str, type[Task]] = {FenTask.name: FenTask, MoveTask.name: MoveTask, TextTask.name: TextTask}


def build_task(cfg: ServiceConfig) -> Task:
    """The run's task, built from its config sections (ValueError, one line, when it cannot be)."""
    return TASKS[cfg.task.name].from_config(cfg)


def check_task_config(cfg: ServiceConfig) -> str | None:
    """One line naming the first thing the run's task cannot use (a `task` key only another task
    reads, set to anything but its default; then the task's own checks); None when all is well."""
    task_cls = TASKS[cfg.task.name]
    fields = type(cfg.task).model_fields
    others = sorted({k for t in TASKS.values() for k in t.config_keys} - task_cls.config_keys)
    for key in others:
        value = getattr(cfg.task, key)
        if value != fields[key].get_default(call_default_factory=True):
            readers = ", ".join(t.name for t in TASKS.values() if key in t.config_keys)
            return f"task.{key}: {value!r} is not read by the {task_cls.name} task (only by: {readers}); remove it"
    return task_cls.check_config(cfg)


__all__ = ["TASKS", "FenTask", "MoveTask", "Task", "TextTask", "build_task", "check_task_config"]
