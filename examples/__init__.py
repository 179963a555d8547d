"""Runnable examples: a task of your own on the generic `text` task (see README)."""
