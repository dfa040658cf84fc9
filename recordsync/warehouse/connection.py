"""Connecting to the warehouse, and the one place where driver errors become recordsync errors.

Session settings per backend:

- SQLite: WAL, so a ``status`` command can read while the daemon writes; a busy timeout, so a
  brief lock waits instead of failing and a long one fails in time (``limits.sqlite_busy``);
  foreign keys on; a bigger page cache and fewer checkpoints than SQLite's defaults, for the
  write path.  The driver's own implicit
  transactions are switched off and SQLAlchemy's ``begin`` emits ``BEGIN`` itself (the recipe
  in SQLAlchemy's SQLite dialect notes): reads get a plain deferred ``BEGIN``, writes
  ``BEGIN IMMEDIATE`` so a read-then-write transaction never fails half-way on a lock upgrade.
- MariaDB: utf8mb4 and ``time_zone = '+00:00'`` on every new connection.
- PostgreSQL and MariaDB (``limits``): the bounds of ``timeouts`` on every wait, on both
  sides: ``WRITES`` for every process that syncs, ``READS`` for the read commands (``status``,
  ``report``, the dry runs), ``PROBE`` for ``status --check``, ``DDL`` for schema changes.
- Every backend: ``pool_pre_ping``, so a connection the server dropped while idle is replaced
  instead of failing the next page.

The server databases are written through the drivers recordsync ships with (the ``postgres``
and ``mysql`` extras), whose bulk paths the page writers use: psycopg 3's binary ``COPY`` and
PyMySQL's escaping (``pages.writer``).  A URL without a driver (``postgresql://``,
``mariadb://``) gets that driver instead of SQLAlchemy's default (psycopg2, mysqlclient,
neither a dependency of recordsync); a URL naming another driver is refused with the one to use.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import URL, Connection

from recordsync.core.database_url import (
    MYSQL_FAMILY,
    parse_database_url,
)
from recordsync.core.errors import (
    ConfigurationError,
    PermissionDeniedError,
    WarehouseUnavailableError,
)
from recordsync.warehouse import timeouts
from recordsync.warehouse.timeouts import SessionLimits

# Execution option marking a write transaction (SQLite then takes the write lock at BEGIN).
WRITE_OPTION: Final = "recordsync_write"


# Per connection, filled only as pages are read: 32 MiB keeps a backfill's peak memory far
# below its 150 MB budget (bench/memory.py) and gives most of what 128 MiB gives.
SQLITE_CACHE_KIB: Final = 32 * 1024
SQLITE_CHECKPOINT_PAGES: Final = 16_384  # a WAL of up to 64 MiB between checkpoints
MYSQL_POOL_RECYCLE_S: Final = 3600  # below MariaDB's default wait_timeout of 8 h


def side_by_side_writer(engine: Engine) -> Engine:
    """The engine of writes that other merchants' (or replicas') writes run beside: marked
    as writes, and on MariaDB at READ COMMITTED, PostgreSQL's level.

    MariaDB's REPEATABLE READ locks the gap where a key is missing (a locking read of a row
    not there yet, a DELETE that finds nothing) up to the next key, which is another
    merchant's: two merchants' first rebuilds, catalogue passes or lease rows inserted side
    by side then waited for each other, or deadlocked.  READ COMMITTED locks only the rows
    found (and gaps for duplicate checks), which is all that writes of one merchant, fenced by
    its lease, need."""
    writer = engine.execution_options(**{WRITE_OPTION: True})
    if engine.dialect.name in MYSQL_FAMILY:
        writer = writer.execution_options(isolation_level="READ COMMITTED")
    return writer


def create_warehouse_engine(
    url: str | URL, *, limits: SessionLimits | None = None, **kwargs: Any
) -> Engine:
    """``create_engine`` with the session settings above; ``limits``: the bounds of every wait
    (``timeouts``; None keeps the server's defaults); ``kwargs`` go to ``create_engine``."""
    parsed = warehouse_url(url)
    backend = parsed.get_backend_name()
    options: dict[str, Any] = {"pool_pre_ping": True, **kwargs}
    connect_args: dict[str, Any] = {}
    if backend != "sqlite":
        # Positional placeholders let the record upsert pass plain tuples (see upsert.py).
        options.setdefault("paramstyle", "format")
    if backend == "postgresql" and limits is not None:
        connect_args = timeouts.postgres_connect_args(limits)
    if backend in MYSQL_FAMILY:
        recycle = MYSQL_POOL_RECYCLE_S if limits is None else timeouts.POOL_RECYCLE
        options.setdefault("pool_recycle", recycle)
        connect_args = {"charset": "utf8mb4"}
        if limits is not None:
            connect_args.update(timeouts.mariadb_connect_args(limits))
    if connect_args or "connect_args" in kwargs:
        options["connect_args"] = {**connect_args, **kwargs.get("connect_args", {})}
    engine = create_engine(parsed, **options)
    if backend == "sqlite":
        busy = (limits or timeouts.WRITES).sqlite_busy
        _configure_sqlite(engine, busy_ms=busy * 1000)
    elif backend in MYSQL_FAMILY and limits is None:
        _configure_mysql(engine)  # with limits, their init command sets the time zone
    return engine


def warehouse_url(url: str | URL) -> URL:
    """``url`` with the driver recordsync writes through (``core.database_url``)."""
    return parse_database_url(url)


def sqlite_file(url: URL) -> str | None:
    """The database file of a SQLite URL; None for an in-memory database or another backend."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if url.query.get("uri") in {"true", "1"} and database.startswith("file:"):
        # SQLAlchemy moves the URI's parameters (mode=memory among them) into url.query.
        parts = urlsplit(database)
        if url.query.get("mode") == "memory" or "mode=memory" in parts.query:
            return None
        database = unquote(parts.path)
    if database in {"", ":memory:"}:
        return None
    return database


def _configure_sqlite(engine: Engine, *, busy_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # BEGIN is emitted by _on_begin below
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
        cursor.execute("PRAGMA journal_mode = WAL")
        # With WAL, NORMAL never corrupts and never splits a transaction; an OS crash may
        # lose the last commits, rows and cursor together, which the sync simply re-reads.
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        # The records B-tree is keyed by random UUIDs, so every page touches pages all over
        # it; with SQLite's 2 MiB default cache most of them are re-read, and checkpoints every
        # 1000 pages write the same hot pages again and again (bench/write_path.py, W2).
        cursor.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
        cursor.execute(f"PRAGMA wal_autocheckpoint = {SQLITE_CHECKPOINT_PAGES}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        write = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _configure_mysql(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("SET time_zone = '+00:00'")
        cursor.close()


def _describe(error: BaseException) -> str:
    """The driver's own message, first line only: no SQL text, no parameters (record data)."""
    cause = getattr(error, "orig", None) or error
    first_line = (str(cause).strip().splitlines() or [""])[0]
    return f"{type(cause).__name__}: {first_line[:300]}"


def _sqlite_cannot_open(error: exc.DBAPIError) -> bool:
    """A SQLite file that is something else than a database: a wrong path, not an outage.

    A server restart is waited out, and so is a file that cannot be opened yet (a volume
    still mounting); a file that opens but holds no database will not fix itself, so it is
    said once and the command stops.
    """
    cause = error.orig
    return isinstance(cause, sqlite3.DatabaseError) and str(cause).startswith(
        "file is not a database"
    )


# A grant missing: PostgreSQL's SQLSTATE class 42501; MariaDB's errors of a denied database,
# table, column, routine or privilege (PyMySQL raises most of them as OperationalError, which
# would otherwise read as "unavailable" and be waited on for ever).
_POSTGRES_DENIED: Final = "42501"
_MARIADB_DENIED: Final = frozenset({1044, 1142, 1143, 1227, 1370})


def _denied(error: exc.DBAPIError) -> bool:
    cause = error.orig
    if getattr(cause, "sqlstate", None) == _POSTGRES_DENIED:
        return True
    code = next(iter(getattr(cause, "args", ())), None)
    return isinstance(code, int) and code in _MARIADB_DENIED


@contextmanager
def translate_errors(action: str) -> Iterator[None]:
    """Turn "the server is gone or busy" into ``WarehouseUnavailableError``; let bugs through.

    Operational errors (refused or dropped connections, lock timeouts, deadlocks), interface
    errors, invalidated connections and pool timeouts mean: wait, reconnect and try again.
    A SQLite file that cannot be opened is a ``ConfigurationError`` (see above), and so is a
    statement the account has no grant for (``PermissionDeniedError``).  Integrity,
    data and programming errors propagate unchanged: retrying would not help.
    """
    try:
        yield
    except exc.DBAPIError as error:
        if _denied(error):
            raise PermissionDeniedError(
                f"the database account may not {action}: {_describe(error)}; see "
                '"Who may run what" in docs/operations.md'
            ) from error
        if _sqlite_cannot_open(error):
            raise ConfigurationError(
                f"the SQLite warehouse file is not a database ({action}): check "
                "RECORDSYNC_DATABASE_URL"
            ) from error
        if isinstance(error, exc.OperationalError | exc.InterfaceError) or (
            error.connection_invalidated
        ):
            raise WarehouseUnavailableError(
                f"warehouse unavailable ({action}): {_describe(error)}"
            ) from error
        raise
    except (exc.DisconnectionError, exc.TimeoutError) as error:
        raise WarehouseUnavailableError(
            f"warehouse unavailable ({action}): {_describe(error)}"
        ) from error
