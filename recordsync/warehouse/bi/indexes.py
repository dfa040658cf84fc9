"""The BI indexes of ``records``: left out while a bulk load fills an empty table, built once
after it (bench/README.md, 7, "Bulk loads build the BI indexes once").

The secondary indexes of ``records`` (``schema.records``: by creation time, player and round)
serve the BI views, ``report``, ``verify`` and the round-event
cross-check; nothing the sync's correctness rests on uses them (the revision guard and the
upserts use the primary key, which is never touched here).  A backfill into an empty table
that keeps them up to date pays for one random leaf per row per index per commit: the write
path takes 65 instead of 35 us per record on SQLite.  So:

- ``defer``: when a NEW snapshot job starts and ``records`` holds no row at all, they are
  dropped (IF EXISTS).  On SQLite and PostgreSQL the drop and the emptiness check share one
  transaction, the check after the drop, which on PostgreSQL holds the table's exclusive lock:
  a row committed meanwhile rolls the drop back.  MariaDB commits DDL at once, so there the
  check comes first; a row landing in between only makes that load slower, never wrong.
- ``build``: the missing ones are built, idempotently, from the definitions in ``schema``
  (the one source of truth), without stopping the writers where the database can:
  PostgreSQL ``CREATE INDEX CONCURRENTLY`` outside any transaction, after dropping an index a
  crashed build left INVALID (``pg_index.indisvalid``), under an advisory lock so that two
  replicas building at once take turns; MariaDB one ``ALTER TABLE`` with ``ALGORITHM=INPLACE,
  LOCK=NONE``; SQLite ``CREATE INDEX IF NOT EXISTS`` (one writer anyway).

The statements are pure functions of the dialect's quoting (``drop_statements``,
``build_statements``); the rest is the I/O that runs them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Final

from sqlalchemy import Connection, Engine, Index, literal, select, text

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.warehouse.schema import records

# Every secondary index of ``records``; unique ones would be keys, which stay.
BI_INDEXES: Final[tuple[Index, ...]] = tuple(
    sorted(
        (index for index in records.indexes if not index.unique), key=lambda index: str(index.name)
    )
)
BI_INDEX_NAMES: Final[tuple[str, ...]] = tuple(str(index.name) for index in BI_INDEXES)
# Indexes revision 0017 dropped because no query reads them.  An older replica that takes up a
# merchant during a rolling upgrade builds them again (to its schema they are missing), so a
# build here drops any it finds: once the upgrade is over they are gone for good.
RETIRED: Final = ("ix_records_merchant_game", "ix_records_merchant_updated")
# Seconds between two looks at the PostgreSQL build lock another replica holds.
BUILD_LOCK_POLL_S: Final = 1.0
# A stable advisory lock key of its own; merchant leases hash "recordsync:<merchant>".
_BUILD_LOCK_KEY: Final = int.from_bytes(
    hashlib.sha256(b"recordsync-bi-indexes:records").digest()[:8], "big", signed=True
)

Quote = Callable[[str], str]


def drop_statements(backend: str, quote: Quote, names: Sequence[str]) -> list[str]:
    """The DDL that drops ``names`` from ``records`` (IF EXISTS: a second drop is a no-op)."""
    if not names:
        return []
    table = quote(records.name)
    if backend in MYSQL_FAMILY:
        drops = ", ".join(f"DROP INDEX IF EXISTS {quote(name)}" for name in names)
        return [f"ALTER TABLE {table} {drops}"]
    return [f"DROP INDEX IF EXISTS {quote(name)}" for name in names]


def build_statements(backend: str, quote: Quote, names: Sequence[str]) -> list[str]:
    """The DDL that builds ``names`` on ``records`` as ``schema`` defines them, online where
    the database can (see the module docstring); IF NOT EXISTS throughout."""
    wanted = [index for index in BI_INDEXES if index.name in names]
    if not wanted:
        return []
    table = quote(records.name)

    def columns(index: Index) -> str:
        return ", ".join(quote(column.name) for column in index.columns)

    if backend in MYSQL_FAMILY:
        adds = ", ".join(
            f"ADD INDEX IF NOT EXISTS {quote(str(index.name))} ({columns(index)})"
            for index in wanted
        )
        return [f"ALTER TABLE {table} {adds}, ALGORITHM=INPLACE, LOCK=NONE"]
    concurrently = " CONCURRENTLY" if backend == "postgresql" else ""
    return [
        f"CREATE INDEX{concurrently} IF NOT EXISTS {quote(str(index.name))} "
        f"ON {table} ({columns(index)})"
        for index in wanted
    ]


def present(conn: Connection) -> dict[str, bool]:
    """The BI indexes that exist, each with whether it is usable (False: a PostgreSQL index
    whose concurrent build died half-way, which the planner ignores)."""
    return {name: valid for name, valid in _indexes(conn).items() if name in BI_INDEX_NAMES}


def retired(conn: Connection) -> list[str]:
    """The retired indexes an older replica built again."""
    found = _indexes(conn)
    return [name for name in RETIRED if name in found]


def _indexes(conn: Connection) -> dict[str, bool]:
    """Every index of ``records``, with whether it is usable."""
    backend = conn.dialect.name
    if backend == "postgresql":
        rows = conn.execute(
            text(
                "SELECT c.relname, i.indisvalid FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE i.indrelid = to_regclass(:table)"
            ),
            {"table": records.name},
        ).all()
        found = {str(name): bool(valid) for name, valid in rows}
    elif backend in MYSQL_FAMILY:
        rows = conn.execute(
            text(
                "SELECT DISTINCT index_name FROM information_schema.statistics "
                "WHERE table_schema = DATABASE() AND table_name = :table"
            ),
            {"table": records.name},
        ).all()
        found = {str(row[0]): True for row in rows}
    else:
        rows = conn.execute(
            text("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :table"),
            {"table": records.name},
        ).all()
        found = {str(row[0]): True for row in rows}
    return found


def missing(conn: Connection) -> list[str]:
    """The BI indexes to build: absent, or left INVALID by a build that died."""
    found = present(conn)
    return [name for name in BI_INDEX_NAMES if not found.get(name, False)]


def has_rows(conn: Connection) -> bool:
    return conn.execute(select(literal(1)).select_from(records).limit(1)).first() is not None


def defer(writer: Engine) -> list[str]:
    """Drop the BI indexes if ``records`` holds no row; the names dropped (none when it has
    rows, or when they were gone already)."""
    backend = writer.dialect.name
    quote = writer.dialect.identifier_preparer.quote
    with writer.connect() as conn:
        if backend in MYSQL_FAMILY:
            # DDL commits at once here: look first (see the module docstring).
            with conn.begin():
                names = sorted(present(conn))
                empty = not has_rows(conn)
            if not empty or not names:
                return []
            for statement in drop_statements(backend, quote, names):
                conn.exec_driver_sql(statement)
            return names
        with conn.begin() as transaction:
            names = sorted(present(conn))
            for statement in drop_statements(backend, quote, names):
                conn.exec_driver_sql(statement)
            if has_rows(conn):
                transaction.rollback()
                return []
        return names


def build(engine: Engine, *, sleep: Callable[[float], None]) -> list[str]:
    """Build the missing BI indexes; the names built (none when all were there)."""
    backend = engine.dialect.name
    quote = engine.dialect.identifier_preparer.quote
    with engine.connect() as conn:
        names, old = missing(conn), retired(conn)
        conn.rollback()
        if not names and not old:
            return []
        if backend != "postgresql":
            with conn.begin():  # MariaDB commits the ALTER by itself
                for statement in [
                    *drop_statements(backend, quote, old),
                    *build_statements(backend, quote, names),
                ]:
                    conn.exec_driver_sql(statement)
            return names
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # Polled, never waited for in one statement: a waiting statement holds a snapshot
        # that the other replica's CONCURRENTLY build would wait for in turn.
        while not conn.execute(
            text("SELECT pg_try_advisory_lock(:key)"), {"key": _BUILD_LOCK_KEY}
        ).scalar_one():
            sleep(BUILD_LOCK_POLL_S)
        try:
            found = present(conn)
            invalid = [name for name, valid in found.items() if not valid]
            for name in [*invalid, *retired(conn)]:
                conn.exec_driver_sql(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(name)}")
            names = missing(conn)
            for statement in build_statements(backend, quote, names):
                conn.exec_driver_sql(statement)
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _BUILD_LOCK_KEY})
    return names
