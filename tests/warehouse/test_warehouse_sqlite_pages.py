"""SQLite's page writer: one tuple per revision, bound to both upserts by number."""

from __future__ import annotations

from datetime import UTC, datetime

from support.warehouse_samples import make_record

from recordsync.warehouse.pages import sqlite as sqlite_pages
from recordsync.warehouse.pages.staging import stage_page

SYNCED = datetime(2026, 1, 2, tzinfo=UTC)


def test_each_revision_is_one_tuple_in_the_writers_row_order() -> None:
    record = make_record("a")
    staged = stage_page([record], (), keep_revisions=True)
    (row,) = sqlite_pages.encode(staged, "m-1", "2026-01-02T00:00:00.000000+00:00")
    named = dict(zip(sqlite_pages._ROW, row, strict=True))
    assert named["record_id"] == "a"
    assert named["merchant_id"] == "m-1"
    assert named["bet_amount"] == str(record.bet_amount)  # the exact decimal text
    assert named["bet_units"] == int(record.bet_amount * 10_000)
    assert named["sequence"] is None


def test_both_upserts_bind_every_column_of_their_table_by_number() -> None:
    for sql in (sqlite_pages.records_upsert(), sqlite_pages.history_upsert()):
        assert f"?{len(sqlite_pages._ROW)}" in sql  # sqlite3 checks the count against this
        assert "?0" not in sql
    assert "WHERE records.revision < excluded.revision" in sqlite_pages.records_upsert()
