"""Runnable examples: a task of your own on the generic `text` task (see docs/guides/text-task.md)."""
