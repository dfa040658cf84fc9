"""The read commands' warehouse cannot write: it offers only their reads, and its
database sessions refuse a write whatever code reaches them, on every backend."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, select, text
from sqlalchemy.exc import DBAPIError
from support.warehouse_samples import MERCHANT, start_rebuild_of_window

from recordsync.warehouse import Warehouse
from recordsync.warehouse.reader import WarehouseReader
from recordsync.warehouse.schema import sync_state


@pytest.fixture
def reader(warehouse: Warehouse, warehouse_url: str):
    start_rebuild_of_window(warehouse)
    opened = WarehouseReader.open(warehouse_url)
    try:
        yield opened
    finally:
        opened.close()


def test_the_reader_reads_what_the_commands_show(reader: WarehouseReader) -> None:
    state = reader.load_state(MERCHANT)
    assert state is not None
    assert reader.status(MERCHANT).merchant_id == MERCHANT
    assert reader.holders("status-test") == {}


def test_the_reader_offers_no_write(reader: WarehouseReader) -> None:
    for write in ("migrate", "commit_tail_page", "start_rebuild", "fenced", "repair_records"):
        assert not hasattr(reader, write)


def test_a_write_through_the_readers_sessions_is_refused(
    reader: WarehouseReader, warehouse: Warehouse
) -> None:
    with pytest.raises(DBAPIError), reader.engine.begin() as conn:
        conn.execute(delete(sync_state).where(sync_state.c.merchant_id == MERCHANT))
    with pytest.raises(DBAPIError), reader.engine.begin() as conn:
        conn.execute(text("CREATE TABLE reader_was_here (x INTEGER)"))
    with warehouse.engine.connect() as conn:  # nothing changed
        assert conn.execute(select(sync_state.c.merchant_id)).scalars().all() == [MERCHANT]
