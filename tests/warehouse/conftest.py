"""Fixtures for the warehouse tests; ``warehouse`` itself comes from tests/conftest.py."""

import pytest
from support.warehouse_samples import start_rebuild_of_window

from recordsync.warehouse import Warehouse


@pytest.fixture
def rebuilding(warehouse: Warehouse) -> Warehouse:
    """A migrated warehouse with a rebuild in progress (``start_rebuild_of_window``)."""
    return start_rebuild_of_window(warehouse)
