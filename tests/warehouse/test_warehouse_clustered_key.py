"""MariaDB: ``records`` and ``record_revisions`` clustered by ``row_id`` (revision 0008).

The migration keeps every row, both ways; the upserts find an existing row through the old
key, now unique, and leave its ``row_id`` (its place in the table) alone; readers never see
the new column.  The side-by-side pages with the highest revision winning are in
test_warehouse_concurrency.py, which runs on this layout too.
"""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from sqlalchemy import inspect, text
from support.dbfixtures import BACKEND_PARAMS
from support.warehouse_reads import fetch_revisions
from support.warehouse_samples import (
    MERCHANT,
    make_change,
    make_record,
    snapshot_page,
    start_rebuild_of_window,
    tail_page,
)

from recordsync.warehouse import Warehouse
from recordsync.warehouse.migrate import _config, current_revision, head_revision
from recordsync.warehouse.schema import CLUSTERED_BY_ROW_ID, ROW_ID

MARIADB = [param for param in BACKEND_PARAMS if param.id == "mariadb"]
OLD_KEYS = {
    "records": ["merchant_id", "record_id"],
    "record_revisions": ["merchant_id", "record_id", "revision"],
}


def _migrate_to(store: Warehouse, revision: str, *, down: bool = False) -> None:
    config = _config()
    with store.engine.begin() as conn:
        config.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(config, revision)


def _rows(store: Warehouse, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` as the columns every backend has, ordered by the old key."""
    with store.engine.connect() as conn:
        rows = conn.execute(text(f"SELECT * FROM {table}")).mappings().all()
    return sorted(
        # extra_fields (revision 0016): NULL in these rows, and absent at 0007.
        ({k: v for k, v in row.items() if k not in {ROW_ID, "extra_fields"}} for row in rows),
        key=lambda row: tuple(row[name] for name in OLD_KEYS[table]),
    )


def _row_ids(store: Warehouse, table: str) -> dict[tuple[Any, ...], int]:
    key = ", ".join(OLD_KEYS[table])
    with store.engine.connect() as conn:
        rows = conn.execute(text(f"SELECT {key}, {ROW_ID} FROM {table}")).all()
    return {tuple(row[:-1]): row[-1] for row in rows}


def _written_at_0007(store: Warehouse) -> None:
    """Both tables written (by this version's writer, so at the head revision), then the
    schema taken down to 0007 with its rows."""
    store.migrate()
    _write_both_tables(store)
    _migrate_to(store, "0007", down=True)


def _write_both_tables(store: Warehouse) -> None:
    start_rebuild_of_window(store)
    snapshot_page(store, *(make_record(f"rec-{n:02d}", 1) for n in range(30)))
    tail_page(
        store,
        *(make_change(make_record(f"rec-{n:02d}", 2), 100 + n) for n in range(0, 30, 3)),
        make_change(make_record("rec-new", 1), 200),
    )


@pytest.mark.parametrize("warehouse_url", MARIADB, indirect=True)
def test_the_upgrade_from_0007_keeps_every_row_and_clusters_by_row_id(warehouse_url):
    store = Warehouse.connect(warehouse_url)
    try:
        _written_at_0007(store)
        before = {table: _rows(store, table) for table in OLD_KEYS}
        store.migrate()
        after = {table: _rows(store, table) for table in OLD_KEYS}
        inspector = inspect(store.engine)
        with store.engine.connect() as conn:
            assert current_revision(conn) == head_revision()
        for table, key in OLD_KEYS.items():
            assert inspector.get_pk_constraint(table)["constrained_columns"] == [ROW_ID]
            unique = {u["name"]: u["column_names"] for u in inspector.get_unique_constraints(table)}
            assert unique == {CLUSTERED_BY_ROW_ID[table]: key}
            ids = _row_ids(store, table)
            assert sorted(ids.values()) == list(range(1, len(ids) + 1))
        assert after == before
        assert len(after["records"]) == 31
        assert len(after["record_revisions"]) == 41
    finally:
        store.close()


@pytest.mark.parametrize("warehouse_url", MARIADB, indirect=True)
def test_the_downgrade_to_0007_keeps_every_row_under_the_old_primary_key(warehouse_url):
    store = Warehouse.connect(warehouse_url)
    try:
        store.migrate()
        _write_both_tables(store)
        before = {table: _rows(store, table) for table in OLD_KEYS}
        _migrate_to(store, "0007", down=True)
        inspector = inspect(store.engine)
        for table, key in OLD_KEYS.items():
            assert inspector.get_pk_constraint(table)["constrained_columns"] == key
            assert inspector.get_unique_constraints(table) == []
            assert ROW_ID not in {column["name"] for column in inspector.get_columns(table)}
        assert {table: _rows(store, table) for table in OLD_KEYS} == before
    finally:
        store.close()


@pytest.mark.parametrize("warehouse_url", MARIADB, indirect=True)
def test_an_upsert_that_meets_a_stored_row_leaves_it_where_it_was(rebuilding):
    """The revision guard and the history's insert-once run through the unique key: a
    higher revision rewrites the row in place, a repeated change page adds and moves
    nothing, and new rows come after every stored one."""
    snapshot_page(rebuilding, make_record("a", 1), make_record("b", 1))
    page = [make_change(make_record("a", 2), 7), make_change(make_record("b", 1), 8)]
    tail_page(rebuilding, *page)
    records, history = _row_ids(rebuilding, "records"), _row_ids(rebuilding, "record_revisions")
    tail_page(rebuilding, *page)
    snapshot_page(rebuilding, make_record("a", 1), make_record("b", 3))
    assert _row_ids(rebuilding, "records") == records
    assert rebuilding.records.fetch_records(MERCHANT)["b"]["revision"] == 3
    revisions = _row_ids(rebuilding, "record_revisions")
    new = revisions.pop((MERCHANT, "b", 3))
    assert revisions == history
    assert new > max(history.values())


@pytest.mark.parametrize("warehouse_url", MARIADB, indirect=True)
def test_readers_never_see_the_row_id(rebuilding):
    snapshot_page(rebuilding, make_record("a", 1))
    assert ROW_ID not in rebuilding.records.fetch_records(MERCHANT)["a"]
    assert ROW_ID not in fetch_revisions(rebuilding, MERCHANT)[0]


@pytest.mark.parametrize("warehouse_url", MARIADB, indirect=True)
def test_an_upgrade_killed_between_its_two_tables_is_finished_by_the_next_start(warehouse_url):
    """MariaDB commits each ALTER by itself: a kill after the first leaves ``records`` done
    and the revision at 0007; the next ``migrate`` must finish, not fail on the done table."""
    store = Warehouse.connect(warehouse_url)
    try:
        _written_at_0007(store)
        before = _rows(store, "records")
        unique_key = CLUSTERED_BY_ROW_ID["records"]
        with store.engine.begin() as conn:
            conn.execute(
                text(
                    f"ALTER TABLE records DROP PRIMARY KEY, ADD COLUMN {ROW_ID} BIGINT UNSIGNED"
                    f" NOT NULL AUTO_INCREMENT, ADD PRIMARY KEY ({ROW_ID}),"
                    f" ADD CONSTRAINT {unique_key} UNIQUE (merchant_id, record_id)"
                )
            )
        store.migrate()
        inspector = inspect(store.engine)
        for table in OLD_KEYS:
            assert inspector.get_pk_constraint(table)["constrained_columns"] == [ROW_ID]
        assert _rows(store, "records") == before
    finally:
        store.close()
