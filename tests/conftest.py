"""Suite-wide plugins."""

from thread_guard import pytest_sessionfinish, pytest_unconfigure  # noqa: F401  (hooks)
