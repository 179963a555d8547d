"""The task registry: `task.name` in the config picks one; adding a task adds a file here.

task = build_task(cfg)      # a service.tasks.Task for the run's config
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.tasks.base import Task
from service.tasks.fen import FenTask

if TYPE_CHECKING:
    from service.config import ServiceConfig

TASKS: dict[str, type[Task]] = {FenTask.name: FenTask}


def build_task(cfg: ServiceConfig) -> Task:
    """The run's task, built from its config sections."""
    return TASKS[cfg.task.name].from_config(cfg)


__all__ = ["TASKS", "FenTask", "Task", "build_task"]
