"""Fixtures shared by every test; the database ones live in dbfixtures.py (see its docstring)."""

from collections.abc import Iterator

import pytest
import structlog
from dbfixtures import warehouse, warehouse_url

from recordsync.logs import process_context

__all__ = ["reset_logging", "warehouse", "warehouse_url"]


@pytest.fixture(autouse=True)
def reset_logging() -> Iterator[None]:
    """Each test starts and ends with structlog's defaults and no process-wide log fields."""
    yield
    structlog.reset_defaults()
    process_context.clear()
