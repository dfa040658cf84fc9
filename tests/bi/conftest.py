"""One warehouse per backend, loaded once with the BI dataset and shared read-only."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from support.bi_data import STALENESS, dataset, load
from support.dbfixtures import BACKEND_PARAMS, fresh_database

from recordsync.warehouse import Warehouse


@pytest.fixture(scope="session", params=BACKEND_PARAMS)
def loaded(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[Warehouse]:
    """A migrated warehouse on ``request.param`` holding ``bi_data.dataset()``."""
    with fresh_database(request.param, tmp_path_factory.mktemp("bi")) as url:
        store = Warehouse.connect(url)
        try:
            store.migrate()
            load(store, dataset(), projection_as_of=datetime.now(UTC) - STALENESS)
            yield store
        finally:
            store.close()
