"""MariaDB: a page as multi-row ``INSERT ... ON DUPLICATE KEY UPDATE`` statements, no stage.

The stage (``pages.writer``) pays on PostgreSQL, where ``COPY`` is cheap; on MariaDB it doubled
the server's work and added PyMySQL's per-parameter escaping (bench/README.md, W1 on MariaDB):
each page was written into an InnoDB temporary table (undo-logged, in the shared buffer pool),
read back through a filesort for the ``ORDER BY``, and deleted again, and PyMySQL's
``executemany`` escapes each of the 23 parameters of a row by a generic, pure-Python dispatch.
Here each page is two statements, one per table, whose ``VALUES`` rows are formatted once per
revision (the columns both tables share are formatted once and used by both rows).

Values are never pasted into SQL as they are: every string goes through PyMySQL's own escaping,
chosen per page as PyMySQL's ``Connection.escape`` chooses it (with ``NO_BACKSLASH_ESCAPES``
the connection's ``escape`` doubles quotes; otherwise the driver's ``escape_str``), amounts
through the driver's ``Decimal`` encoder (which refuses NaN and infinities), integers through
``{:d}`` (anything else raises), times through ``mysql_time_literals`` (digits only).  The
connection is utf8mb4 (``connection``), whose multi-byte sequences never contain a quote or
backslash byte, the same assumption PyMySQL's own parameter binding makes.

The guards are those of ``pages.writer`` (compiled by SQLAlchemy for the connected dialect, so
MySQL 8's ``AS new`` alias or MariaDB's ``VALUES()`` as the server wants):

- ``records``: every column ``IF(VALUES(revision) > revision, VALUES(col), col)``, ``revision``
  last, since MariaDB assigns left to right; a lower or equal revision changes nothing;
- ``record_revisions``: ``changed_at`` then ``sequence`` filled only where ``sequence`` was
  NULL.

Rows go in ordered by key, as the stage's ``ORDER BY`` had them, so concurrent writers lock in
the same order.  A page too big for one statement is split (same transaction, same order).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from sqlalchemy import Connection, func
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect

from recordsync.warehouse.pages.staging import StagedRevision
from recordsync.warehouse.schema import record_revisions, records
from recordsync.warehouse.types import money_units, mysql_time_literals, mysql_time_text

_AMOUNTS: Final = ("bet", "refund", "payout", "net")
# The row formatter below writes the tables' columns in this order: merchant_id, the columns
# both tables share (record_id .. updated_at, formatted once per revision), then each table's
# own; ``_split`` checks the compiled statements against it.
_SHARED: Final = tuple(c.name for c in records.columns)[1:16]
RECORD_COLUMNS: Final = (
    "merchant_id",
    *_SHARED,
    "synced_at",
    *(f"{a}_units" for a in _AMOUNTS),
    "extra_fields",
)
HISTORY_COLUMNS: Final = (
    "merchant_id",
    *_SHARED,
    "sequence",
    "changed_at",
    "synced_at",
    "extra_fields",
)
_RECORD_KEY: Final = ("merchant_id", "record_id")
# Every column a records update replaces; ``revision`` last (assignments run left to right).
_UPDATED: Final = (
    *(c.name for c in records.columns if c.name not in {*_RECORD_KEY, "revision"}),
    "revision",
)
# Characters per statement before the page is split: PyMySQL's own executemany limit, far
# below max_allowed_packet (16 MiB by default) even when every character takes 4 bytes.
MAX_STATEMENT_CHARS: Final = 1_024_000
# PyMySQL's SERVER_STATUS_NO_BACKSLASH_ESCAPES (pymysql.constants.SERVER_STATUS).
_NO_BACKSLASH_ESCAPES: Final = 512
# ``VALUES (%s, ...)`` or ``VALUES (%(name)s, ...)``: the one-row statement SQLAlchemy compiles.
_PLACEHOLDER: Final = r"(?:%s|%\(\w+\)s|\?|:\w+)"
_INSERT_VALUES: Final = re.compile(  # a pattern for compiled SQL, not a query:
    rf"(INSERT INTO [^()]+ \([\w, ]+\) VALUES )\({_PLACEHOLDER}(?:, {_PLACEHOLDER})*\)(.*)",  # noqa: S608
    re.DOTALL,
)

# Every character PyMySQL's escapes change (NUL, LF, CR, Ctrl-Z, both quotes, backslash); a
# superset of what the NO_BACKSLASH_ESCAPES mode changes (the single quote).
_ESCAPED_CHARACTER: Final = re.compile(r"""[\x00\n\r\x1a"'\\]""").search
# No parameters at all, so PyMySQL never %-formats the text (a value may hold "%s").
_LITERAL_SQL: Final = {"no_parameters": True}

Quote = Callable[[str], str]


def _records_upsert() -> Any:
    """``records``: a stored revision never goes down (see ``pages.writer``)."""
    statement = mysql.insert(records)
    incoming = statement.inserted
    newer = incoming.revision > records.c.revision
    return statement.on_duplicate_key_update(
        [(name, func.if_(newer, incoming[name], records.c[name])) for name in _UPDATED]
    )


def _history_upsert() -> Any:
    """``record_revisions``: new revisions; only an unknown sequence and change time filled."""
    table = record_revisions
    statement = mysql.insert(table)
    incoming = statement.inserted
    unknown = table.c.sequence.is_(None)
    return statement.on_duplicate_key_update(
        [
            ("changed_at", func.if_(unknown, incoming.changed_at, table.c.changed_at)),
            ("sequence", func.coalesce(table.c.sequence, incoming.sequence)),
        ]
    )


def _split(statement: Any, dialect: Dialect, columns: tuple[str, ...]) -> tuple[str, str]:
    """(``INSERT INTO t (...) VALUES ``, ``ON DUPLICATE KEY UPDATE ...``) as compiled."""
    compiled = statement.compile(dialect=dialect)
    names = tuple(compiled.positiontup or compiled.binds)
    match = _INSERT_VALUES.fullmatch(compiled.string)
    if match is None or names != columns:
        raise RuntimeError(f"unexpected upsert for the page writer: {compiled.string[:200]}")
    return match.group(1), match.group(2)


def _time(value: datetime) -> str:
    """``'2024-03-01 00:01:00.000000'``: a DATETIME(6) literal in UTC (``types``)."""
    return f"'{mysql_time_text(value)}'"


def _quote_for(dbapi_connection: Any) -> Quote:
    """The driver's string literal for this session, as ``Connection.escape`` picks it.

    A string holding none of the characters either escape changes is its own literal in
    quotes; only the others go through the driver (its generic ``translate`` costs twice
    the check, for every id, player and game of every record: bench/README.md, 7).
    """
    escape: Quote
    if dbapi_connection.server_status & _NO_BACKSLASH_ESCAPES:
        escape = dbapi_connection.escape  # doubles single quotes, backslashes literal
    else:
        from pymysql.converters import escape_str  # noqa: PLC0415 - PyMySQL is optional

        escape = escape_str
    escaped = _ESCAPED_CHARACTER

    def quote(value: str) -> str:
        if escaped(value) is None:
            return f"'{value}'"
        return escape(value)

    return quote


def _statements(prefix: str, rows: list[str], suffix: str) -> list[str]:
    """``prefix row,row,... suffix``, split so that no statement outgrows the limit."""
    statements = []
    start = size = 0
    for index, row in enumerate(rows):
        if size and size + len(row) > MAX_STATEMENT_CHARS:
            statements.append(prefix + ",".join(rows[start:index]) + suffix)
            start = index
            size = 0
        size += len(row) + 1
    statements.append(prefix + ",".join(rows[start:]) + suffix)
    return statements


class MariaDBPageWriter:
    """Writes a page's staged revisions into ``records`` and ``record_revisions``.

    Built once per warehouse; ``write`` runs inside the caller's transaction.
    """

    def __init__(self, dialect: Dialect) -> None:
        self._records = _split(_records_upsert(), dialect, RECORD_COLUMNS)
        self._history = _split(_history_upsert(), dialect, HISTORY_COLUMNS)

    def send(self, conn: Connection, staged: Sequence[StagedRevision]) -> None:
        """Nothing ahead: the rows go with the statements that write them (``merge``)."""

    def merge(
        self,
        conn: Connection,
        merchant_id: str,
        staged: Sequence[StagedRevision],
        synced_at: datetime,
    ) -> None:
        self.write(conn, merchant_id, staged, synced_at)

    def write(
        self,
        conn: Connection,
        merchant_id: str,
        staged: Sequence[StagedRevision],
        synced_at: datetime,
    ) -> None:
        record_rows, history_rows = self.rows(
            conn.connection.dbapi_connection, merchant_id, staged, synced_at
        )
        for rows, (prefix, suffix) in ((record_rows, self._records), (history_rows, self._history)):
            if rows:
                for sql in _statements(prefix, rows, suffix):
                    conn.exec_driver_sql(sql, execution_options=_LITERAL_SQL)

    @staticmethod
    def rows(
        dbapi_connection: Any,
        merchant_id: str,
        staged: Sequence[StagedRevision],
        synced_at: datetime,
    ) -> tuple[list[str], list[str]]:
        """The ``VALUES`` rows for ``records`` (by record_id) and ``record_revisions``."""
        q = _quote_for(dbapi_connection)
        d: Callable[[Decimal, Any], str] = dbapi_connection.encoders[Decimal]
        merchant = q(merchant_id)
        synced = _time(synced_at)
        # The page's times column by column, one call each (``types.mysql_time_literals``).
        records = [item.record for item in staged]
        created = mysql_time_literals([r.created_at for r in records])
        settled = mysql_time_literals([r.settled_at for r in records])
        updated = mysql_time_literals([r.updated_at for r in records])
        shared = [
            f"{merchant},{q(r.record_id)},{r.revision:d},{q(r.player_id)},{q(r.game_id)},"
            f"{q(r.currency)},{q(r.round_id)},"
            f"{'NULL' if r.parent_round_id is None else q(r.parent_round_id)},"
            f"{d(r.bet_amount, None)},{d(r.refund_amount, None)},"
            f"{d(r.payout_amount, None)},{d(r.net_amount, None)},{q(r.status)},"
            f"{created_at},{settled_at},{updated_at}"
            for r, created_at, settled_at, updated_at in zip(
                records, created, settled, updated, strict=True
            )
        ]
        tops = sorted(
            (item.record.record_id, values, item.record)
            for item, values in zip(staged, shared, strict=True)
            if item.is_top
        )
        record_rows = [
            f"({values},{synced},{_units(r.bet_amount)},{_units(r.refund_amount)},"
            f"{_units(r.payout_amount)},{_units(r.net_amount)},"
            f"{'NULL' if r.extra_fields is None else q(r.extra_fields)})"
            for _, values, r in tops
        ]
        history = [
            (item.record.record_id, item.record.revision, values, item)
            for item, values in zip(staged, shared, strict=True)
            if item.in_history
        ]
        history.sort(key=_revision_key)
        changed = mysql_time_literals([item.changed_at for _, _, _, item in history])
        history_rows = [
            f"({values},{'NULL' if item.sequence is None else q(item.sequence)},"
            f"{changed_at},{synced},"
            f"{'NULL' if item.record.extra_fields is None else q(item.record.extra_fields)})"
            for (_, _, values, item), changed_at in zip(history, changed, strict=True)
        ]
        return record_rows, history_rows


def _revision_key(row: tuple[str, int, str, StagedRevision]) -> tuple[str, int]:
    return row[0], row[1]


def _units(amount: Decimal) -> str:
    units = money_units(amount)
    return "NULL" if units is None else f"{units:d}"
