"""The task registry: `task.name` in the config picks one; adding a task adds a file here (and its
keys, a variant of the `task` section, to `service.task_config`).

task = build_task(cfg)      # a service.tasks.Task for the run's config
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.tasks.base import Task
from service.tasks.code import CodeTask
from service.tasks.env import EnvTask
from service.tasks.fen import FenTask
from service.tasks.move import MoveTask
from service.tasks.text import TextTask

if TYPE_CHECKING:
    from service.config import ServiceConfig

TASKS: dict[str, type[Task]] = {
    FenTask.name: FenTask,
    MoveTask.name: MoveTask,
    TextTask.name: TextTask,
    CodeTask.name: CodeTask,
    EnvTask.name: EnvTask,
}


def build_task(cfg: ServiceConfig) -> Task:
    """The run's task, built from its config sections (ValueError, one line, when it cannot be)."""
    return TASKS[cfg.task.name].from_config(cfg)


__all__ = ["TASKS", "CodeTask", "EnvTask", "FenTask", "MoveTask", "Task", "TextTask", "build_task"]
