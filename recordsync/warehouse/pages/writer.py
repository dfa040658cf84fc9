"""Writing a page: stage its revisions once, then merge them into both tables under the guards.

Per page, inside the caller's transaction (``pages.commits``), on PostgreSQL:

1. the session's temporary stage table is created if this connection has none yet
   (PostgreSQL empties it at every commit itself: ``ON COMMIT DELETE ROWS``);
2. the staged rows go in once, as one buffer, by psycopg 3's ``COPY`` (``pages.postgres.copy``):
   a snapshot page's in CSV encoded by msgspec (``copy_csv``), any other in the ``COPY``
   text format (``copy_text``);
3. ``records`` takes the ``is_top`` rows under the revision guard, its integer ``*_units``
   computed by the server from the exact amounts, and ``record_revisions`` the
   ``in_history`` rows, each by one ``INSERT ... SELECT`` from the stage.

SQLite skips the stage (``pages.sqlite``: two prepared upserts by ``executemany``, cheaper
for its one writer), and so does MariaDB (``pages.mariadb``: it cost the server twice the
work there): the same guards in two multi-row ``INSERT ... ON DUPLICATE KEY UPDATE``
statements, each value escaped by PyMySQL once.  ``page_writer_for`` picks the writer for
the connected dialect.

The guards (spec, Records endpoints: "the client keeps, per record_id, the highest revision";
snapshot and change pages arrive in any order relative to each other):

- ``records``: ``ON CONFLICT (merchant_id, record_id) DO UPDATE ... WHERE records.revision <
  excluded.revision``;
- ``record_revisions``: a stored revision is never duplicated nor rewritten, except that one
  first seen in a snapshot gets the change stream's ``sequence`` and ``changed_at`` when they
  arrive (they were unknown, not different): ``ON CONFLICT DO UPDATE ... WHERE
  record_revisions.sequence IS NULL``.

Both merges read the stage ordered by key, so concurrent writers lock rows in the same order
and cannot deadlock each other.  The statements are compiled once per warehouse for the
connected dialect.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final, Protocol

from sqlalchemy import (
    BigInteger,
    Connection,
    String,
    between,
    bindparam,
    case,
    cast,
    literal_column,
    select,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import CreateTable
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import ColumnElement

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.warehouse.pages.mariadb import MariaDBPageWriter
from recordsync.warehouse.pages.postgres.copy import StageCopy
from recordsync.warehouse.pages.postgres.copy_csv import snapshot_csv
from recordsync.warehouse.pages.postgres.copy_text import copy_text
from recordsync.warehouse.pages.sqlite import SQLitePageWriter
from recordsync.warehouse.pages.staging import StagedRevision, stage
from recordsync.warehouse.schema import ID_LENGTH, record_revisions, records
from recordsync.warehouse.types import MAX_UNITS, UNITS_PER_MONEY, aware_utc

_RECORD_KEY: Final = ("merchant_id", "record_id")
_REVISION_KEY: Final = ("merchant_id", "record_id", "revision")
# Every column a records update replaces.
_UPDATED: Final = (
    *(c.name for c in records.columns if c.name not in {*_RECORD_KEY, "revision"}),
    "revision",
)
# The two values every row of a page shares, bound once per statement.
_PAGE_PARAMETERS: Final = ("merchant_id", "synced_at")


class PageWriter(Protocol):
    def send(self, conn: Connection, staged: Sequence[StagedRevision]) -> None:
        """Send the page's rows to the server ahead of the rest, where the writer stages them
        (PostgreSQL's COPY): it writes nothing shared, so it may come before the fence check,
        and a client paused in the middle of it then holds no lock.  Where the
        writer does not stage, nothing."""

    def merge(
        self,
        conn: Connection,
        merchant_id: str,
        staged: Sequence[StagedRevision],
        synced_at: datetime,
    ) -> None:
        """Write the page's revisions, ``send`` done before, inside the caller's transaction."""

    def write(
        self,
        conn: Connection,
        merchant_id: str,
        staged: Sequence[StagedRevision],
        synced_at: datetime,
    ) -> None:
        """``send`` then ``merge``."""


def page_writer_for(dialect: Dialect) -> PageWriter:
    """The writer for ``dialect``; the driver is the one ``connection`` insists on."""
    if dialect.name in MYSQL_FAMILY:
        return MariaDBPageWriter(dialect)
    if dialect.name == "sqlite":
        return SQLitePageWriter()
    return StagePageWriter(dialect)


def _dialect_insert(backend: str) -> Callable[[Any], Any]:
    """Only PostgreSQL stages pages (SQLite: ``pages.sqlite``; MariaDB: ``pages.mariadb``)."""
    if backend == "postgresql":
        return postgresql.insert
    raise ValueError(f"no stage writer for database backend {backend!r}")


def _from_stage(table: Any, backend: str, where: ColumnElement[bool], *order: str) -> Any:
    """``INSERT INTO table (...) SELECT ... FROM stage WHERE where ORDER BY order``."""
    names = [column.name for column in table.columns]

    def source(name: str) -> Any:
        if name == "merchant_id":
            return cast(bindparam("merchant_id"), String(ID_LENGTH))
        if name == "synced_at":
            return bindparam("synced_at")
        if name.endswith("_units"):
            return _units(stage.c[name.removesuffix("_units") + "_amount"])
        return stage.c[name]

    rows = select(*(source(name) for name in names)).where(where)
    rows = rows.order_by(*(stage.c[name] for name in order))
    return _dialect_insert(backend)(table).from_select(names, rows)


def _units(amount: Any) -> Any:
    """``records.*_units`` from the exact NUMERIC amount, by the server (``types.money_units``:
    the amount times 10**4, NULL beyond a BIGINT); exact, since amounts have at most 4
    fraction digits, and one Python call per amount less for every record."""
    scaled = amount * literal_column(str(UNITS_PER_MONEY))
    in_range = between(scaled, literal_column(str(-MAX_UNITS)), literal_column(str(MAX_UNITS)))
    return case((in_range, cast(scaled, BigInteger)), else_=None)


def build_records_merge(backend: str) -> Insert:
    """The page's top rows into ``records``; a stored revision never goes down."""
    statement = _from_stage(records, backend, stage.c.is_top, "record_id")
    return statement.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=[records.c[name] for name in _RECORD_KEY],
        set_={name: statement.excluded[name] for name in _UPDATED},
        where=records.c.revision < statement.excluded.revision,
    )


def build_history_merge(backend: str) -> Insert:
    """The page's revisions into ``record_revisions``; only unknown sequences are filled."""
    table = record_revisions
    statement = _from_stage(table, backend, stage.c.in_history, "record_id", "revision")
    return statement.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=[table.c[name] for name in _REVISION_KEY],
        set_={"sequence": statement.excluded.sequence, "changed_at": statement.excluded.changed_at},
        where=table.c.sequence.is_(None) & statement.excluded.sequence.is_not(None),
    )


class _Compiled:
    """A statement compiled for one dialect, and how to bind the page's shared values."""

    def __init__(self, statement: Any, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql: str = compiled.string
        names = tuple(compiled.positiontup or ()) if compiled.positional else None
        if names is not None and set(names) - set(_PAGE_PARAMETERS):
            raise RuntimeError(f"unexpected parameters {names}")
        self._names = names

    def parameters(self, shared: dict[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        if self._names is None:  # an engine configured with a named paramstyle
            return shared
        return tuple(shared[name] for name in self._names)


class StagePageWriter:
    """Stages a page and merges it into ``records`` and ``record_revisions`` (PostgreSQL).

    Built once per warehouse from the connected dialect; ``write`` runs inside the caller's
    transaction, which also moves the cursor that covers the page.
    """

    def __init__(self, dialect: Dialect) -> None:
        backend = dialect.name
        self._create_stage = str(CreateTable(stage, if_not_exists=True).compile(dialect=dialect))
        # PostgreSQL empties the stage at every commit itself (ON COMMIT DELETE ROWS).
        self._copy = StageCopy()
        self._records_merge = _Compiled(build_records_merge(backend), dialect)
        self._history_merge = _Compiled(build_history_merge(backend), dialect)

    def send(self, conn: Connection, staged: Sequence[StagedRevision]) -> None:
        """The stage created if needed, then the page's rows into it by one COPY."""
        if not staged:
            return
        conn.exec_driver_sql(self._create_stage)
        snapshot = snapshot_csv(staged)
        if snapshot is None:
            self._copy.load(conn, copy_text(staged))
        else:
            self._copy.load_csv(conn, snapshot)

    def write(
        self,
        conn: Connection,
        merchant_id: str,
        staged: Sequence[StagedRevision],
        synced_at: datetime,
    ) -> None:
        self.send(conn, staged)
        self.merge(conn, merchant_id, staged, synced_at)

    def merge(
        self,
        conn: Connection,
        merchant_id: str,
        staged: Sequence[StagedRevision],
        synced_at: datetime,
    ) -> None:
        """Both tables from the stage ``send`` filled."""
        if not staged:
            return
        shared = {"merchant_id": merchant_id, "synced_at": aware_utc(synced_at)}
        if any(item.is_top for item in staged):
            merge = self._records_merge
            conn.exec_driver_sql(merge.sql, merge.parameters(shared))
        if any(item.in_history for item in staged):
            merge = self._history_merge
            conn.exec_driver_sql(merge.sql, merge.parameters(shared))
