"""Hostile values round-trip exactly: MariaDB's page writer sends them as escaped literals,
PostgreSQL's as COPY text.

MariaDB's page writer formats each page's values into the SQL text (``warehouse.pages.mariadb``), so
every string must come back byte for byte, in both of MariaDB's string-literal modes;
PostgreSQL's writes each page as one buffer in COPY text format (``copy_text``), where a
backslash, tab, newline or carriage return must be escaped and ``\\N`` is NULL; SQLite binds
parameters.  The same pages go through all three, which must agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pymysql
import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec.structs import replace
from sqlalchemy import event
from support.dbfixtures import BACKEND_PARAMS, fresh_database
from support.warehouse_reads import fetch_revisions
from support.warehouse_samples import (
    MERCHANT,
    T0,
    make_record,
    row_view,
    snapshot_page,
    start_rebuild_of_window,
    stored_view,
)

from recordsync.core.models import Record, RecordChange
from recordsync.core.state import TailPage
from recordsync.warehouse import Warehouse
from recordsync.warehouse.connection import create_warehouse_engine
from recordsync.warehouse.pages.mariadb import MAX_STATEMENT_CHARS, _quote_for
from recordsync.warehouse.types import mysql_time_text

HOSTILE = [
    "it's",
    "''",
    "\\",
    "ends with a backslash \\",
    "\\'; DROP TABLE records; --",
    "'); DELETE FROM records; --",
    '"double" `back`',
    "%s %(merchant_id)s %% ?",
    "line\nbreak\rreturn\x1actrl-z\ttab",
    "ünïcødé 名前 🎲 \u2019\u00a0",
    "\u00bf'",  # a multi-byte character right before a quote
    "\U0001f600\\",  # four UTF-8 bytes, then a backslash
    "\\N",  # PostgreSQL's COPY text NULL, as a value (copy_text)
    "\\.",  # the end of COPY text data, as a value
]


def hostile_records() -> list[Record]:
    return [
        make_record(
            f"rec-{index:02d}-{text}",
            revision=index + 1,
            player_id=text,
            game_id=f"g{text}",
            round_id=text,
            parent_round_id=f"{text}p",
            status=text[:64],
            currency=text[:16],
        )
        for index, text in enumerate(HOSTILE)
    ]


def changes_for(records: list[Record], sequences: list[str]) -> list[RecordChange]:
    return [
        RecordChange(
            sequence=sequence,
            record_id=record.record_id,
            revision=record.revision,
            changed_at=record.updated_at + timedelta(milliseconds=5),
            record=record,
        )
        for record, sequence in zip(records, sequences, strict=True)
    ]


def no_backslash_escapes(url: str) -> Warehouse:
    """A warehouse whose sessions treat a backslash as an ordinary character."""
    engine = create_warehouse_engine(url)

    @event.listens_for(engine, "connect")
    def _mode(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
        cursor.close()

    return Warehouse(engine)


VARIANTS = [
    *(pytest.param((p.values[0], False), id=p.id, marks=p.marks) for p in BACKEND_PARAMS),
    pytest.param(("mariadb", True), id="mariadb-no-backslash-escapes", marks=pytest.mark.mariadb),
]


@pytest.fixture(params=VARIANTS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Warehouse]:
    kind, plain_backslashes = request.param
    with fresh_database(kind, tmp_path) as url:
        warehouse = no_backslash_escapes(url) if plain_backslashes else Warehouse.connect(url)
        try:
            warehouse.migrate()
            start_rebuild_of_window(warehouse)
            yield warehouse
        finally:
            warehouse.close()


def test_hostile_strings_round_trip_through_both_tables(store: Warehouse) -> None:
    records = hostile_records()
    snapshot_page(store, *records)
    stored = store.records.fetch_records(MERCHANT)
    assert {key: row_view(row) for key, row in stored.items()} == {
        record.record_id: stored_view(record) for record in records
    }
    history = fetch_revisions(store, MERCHANT)
    assert [(row["record_id"], row["player_id"], row["sequence"]) for row in history] == sorted(
        (record.record_id, record.player_id, None) for record in records
    )


def test_hostile_sequences_fill_the_history_exactly(store: Warehouse) -> None:
    records = hostile_records()
    snapshot_page(store, *records)  # known from a snapshot first: no sequence yet
    # PostgreSQL refuses NUL in text (records with one are quarantined, see upsert.unstorable);
    # a sequence is not checked for it, so only the others get one here.
    nul = "" if store.engine.dialect.name == "postgresql" else "\x00"
    sequences = [f"{index}{nul}{text}" for index, text in enumerate(HOSTILE)]
    newer = [replace(record, revision=record.revision + 100) for record in records]
    store.pages.commit_tail_page(
        MERCHANT,
        TailPage(
            records=newer,
            rejected=[],
            next_cursor="tail-next",
            last_sequence="99",
            projection_as_of=T0,
            position="tail-0",
            changes=changes_for(records, sequences) + changes_for(newer, sequences),
        ),
    )
    filled = {
        (row["record_id"], row["revision"]): row["sequence"]
        for row in fetch_revisions(store, MERCHANT)
    }
    assert filled == {
        **{(r.record_id, r.revision): s for r, s in zip(records, sequences, strict=True)},
        **{(r.record_id, r.revision): s for r, s in zip(newer, sequences, strict=True)},
    }
    assert {key: row["revision"] for key, row in store.records.fetch_records(MERCHANT).items()} == {
        record.record_id: record.revision for record in newer
    }


def test_a_page_longer_than_one_statement_is_split_and_stored_whole(store: Warehouse) -> None:
    long_id = "x" * 200
    records = [
        make_record(f"{index:04d}{long_id}", player_id=long_id, game_id=long_id, round_id=long_id)
        for index in range(2 * MAX_STATEMENT_CHARS // 1000)
    ]
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement.startswith("INSERT INTO records"):
            statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        snapshot_page(store, *records)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert set(store.records.fetch_records(MERCHANT)) == {record.record_id for record in records}
    assert len(fetch_revisions(store, MERCHANT)) == len(records)
    if store.engine.dialect.name in {"mysql", "mariadb"}:
        assert len(statements) > 1


@pytest.mark.parametrize("server_status", [0, 512], ids=["backslash-escapes", "no-backslash"])
@given(value=st.text() | st.sampled_from(HOSTILE) | st.text(alphabet="\x00\n\r\x1a\"'\\ab"))
def test_a_string_is_quoted_exactly_as_the_driver_quotes_it(server_status: int, value: str) -> None:
    """The page writer skips the driver's escape for strings that need none (``_quote_for``):
    what it writes must still be the driver's literal, in both string-literal modes."""
    connection = pymysql.connections.Connection(defer_connect=True)
    connection.server_status = server_status  # 512: SERVER_STATUS_NO_BACKSLASH_ESCAPES

    assert _quote_for(connection)(value) == connection.escape(value)


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2024, 3, 1, 0, 1, 2, 345678, tzinfo=UTC),
        datetime(2024, 3, 1, 2, 1, 2, 345678, tzinfo=timezone(timedelta(hours=2))),
        datetime(2024, 3, 1, 0, 1, 2, 345678, tzinfo=timezone(timedelta(0))),
        datetime(2024, 3, 1, 0, 1, 2, tzinfo=UTC),
    ],
    ids=["utc", "plus-two-hours", "other-zero-offset", "no-microseconds"],
)
def test_times_are_written_as_utc_datetime6_literals(moment: datetime) -> None:
    expected = "2024-03-01 00:01:02." + ("345678" if moment.microsecond else "000000")
    assert mysql_time_text(moment) == expected


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        mysql_time_text(datetime(2024, 3, 1))  # noqa: DTZ001 - the case under test
