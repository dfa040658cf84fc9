"""The revision-guarded upsert: one statement per page batch, and a revision never goes down.

Spec, Records endpoints: "The same record may appear several times; the client keeps, per
record_id, the highest revision", and snapshot pages and change pages arrive in any order
relative to each other.  So every write is "insert, or replace the row only if the incoming
revision is higher".

- The batch is first collapsed to the highest revision per record_id: PostgreSQL refuses an
  ``ON CONFLICT DO UPDATE`` that touches the same row twice in one statement, and fewer rows
  is less work.  The result is sorted by record_id so concurrent writers lock rows in the
  same order and do not deadlock each other.
- SQLite and PostgreSQL: ``INSERT ... ON CONFLICT (merchant_id, record_id) DO UPDATE SET ...
  WHERE records.revision < excluded.revision``.
- MariaDB: ``INSERT ... ON DUPLICATE KEY UPDATE`` has no WHERE and evaluates its assignments
  left to right, each seeing the columns already assigned.  Every column is therefore
  guarded on the *old* revision, ``col = IF(VALUES(revision) > revision, VALUES(col), col)``,
  and ``revision`` is assigned last.

The statement is compiled once per warehouse and the rows go as executemany parameters,
encoded in one comprehension per backend (``CompiledUpsert``): psycopg pipelines them, PyMySQL
folds them into one multi-row INSERT, sqlite3 loops in C.  Every row also carries its amounts
as integer units of 10**-4 (``money_units``; the ``*_units`` columns SQLite's views sum).

A record the columns cannot hold (an identifier longer than the column, an amount beyond
NUMERIC(30,4), a revision beyond BIGINT, a NUL character PostgreSQL refuses) would fail the
whole batch on every retry: a crash loop.  ``unstorable()`` finds those first, and the caller
quarantines them with the reason, on every backend alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import func
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.dml import Insert

from recordsync.models import Record
from recordsync.warehouse.compiled import CompiledRows, Encoder, compile_rows
from recordsync.warehouse.schema import CODE_LENGTH, ID_LENGTH, records
from recordsync.warehouse.types import (
    MONEY_PRECISION,
    MONEY_SCALE,
    MYSQL_FAMILY,
    aware_utc,
    money_units,
    mysql_time_text,
    sqlite_time_text,
)

_KEY: Final = ("merchant_id", "record_id")
# Every column an update replaces; ``revision`` last, which matters on MariaDB.
_UPDATED: Final = (
    *(column.name for column in records.columns if column.name not in {*_KEY, "revision"}),
    "revision",
)

MAX_REVISION: Final = 2**63 - 1  # BIGINT
_MONEY_DIGITS: Final = MONEY_PRECISION - MONEY_SCALE  # integer digits NUMERIC(30,4) holds
_ID_FIELDS: Final = ("record_id", "player_id", "game_id", "round_id", "parent_round_id")
_CODE_FIELDS: Final = ("currency", "status")
_AMOUNT_FIELDS: Final = ("bet_amount", "refund_amount", "payout_amount", "net_amount")


def collapse(batch: Iterable[Record]) -> list[Record]:
    """The highest revision per record_id (the first one on a tie), ordered by record_id."""
    best: dict[str, Record] = {}
    for record in batch:
        held = best.get(record.record_id)
        if held is None or record.revision > held.revision:
            best[record.record_id] = record
    return [best[record_id] for record_id in sorted(best)]


def build_upsert(backend: str) -> Insert:
    """The revision-guarded upsert for ``backend`` (a SQLAlchemy dialect name)."""
    if backend in MYSQL_FAMILY:
        statement = mysql.insert(records)
        incoming = statement.inserted
        newer = incoming.revision > records.c.revision
        return statement.on_duplicate_key_update(
            [(name, func.if_(newer, incoming[name], records.c[name])) for name in _UPDATED]
        )
    if backend in {"postgresql", "sqlite"}:
        dialect_insert = postgresql.insert if backend == "postgresql" else sqlite.insert
        upsert = dialect_insert(records)
        return upsert.on_conflict_do_update(
            index_elements=[records.c[name] for name in _KEY],
            set_={name: upsert.excluded[name] for name in _UPDATED},
            where=records.c.revision < upsert.excluded.revision,
        )
    raise ValueError(f"no upsert for database backend {backend!r}")


# The parameter order of every row tuple: the table's column order, which is also the order
# in which the compiled INSERT lists its placeholders (checked in compile_upsert).
COLUMNS: Final = tuple(column.name for column in records.columns)


def _sqlite_rows(
    merchant_id: str, batch: Sequence[Record], synced_at: datetime
) -> list[tuple[Any, ...]]:
    """SQLite: decimal strings as sent and fixed-width UTC text (see ``types``)."""
    t = sqlite_time_text
    u = money_units
    synced = t(synced_at)
    return [
        (
            merchant_id,
            r.record_id,
            r.revision,
            r.player_id,
            r.game_id,
            r.currency,
            r.round_id,
            r.parent_round_id,
            str(r.bet_amount),
            str(r.refund_amount),
            str(r.payout_amount),
            str(r.net_amount),
            r.status,
            t(r.created_at),
            None if r.settled_at is None else t(r.settled_at),
            t(r.updated_at),
            synced,
            u(r.bet_amount),
            u(r.refund_amount),
            u(r.payout_amount),
            u(r.net_amount),
        )
        for r in batch
    ]


def _native_decimal_rows(time: Callable[[datetime], Any]) -> Encoder[Record]:
    """PostgreSQL and MariaDB: the driver takes ``Decimal`` as it is; ``time`` encodes times."""

    def encode(
        merchant_id: str, batch: Sequence[Record], synced_at: datetime
    ) -> list[tuple[Any, ...]]:
        t = time
        u = money_units
        synced = t(synced_at)
        return [
            (
                merchant_id,
                r.record_id,
                r.revision,
                r.player_id,
                r.game_id,
                r.currency,
                r.round_id,
                r.parent_round_id,
                r.bet_amount,
                r.refund_amount,
                r.payout_amount,
                r.net_amount,
                r.status,
                t(r.created_at),
                None if r.settled_at is None else t(r.settled_at),
                t(r.updated_at),
                synced,
                u(r.bet_amount),
                u(r.refund_amount),
                u(r.payout_amount),
                u(r.net_amount),
            )
            for r in batch
        ]

    return encode


# psycopg binds aware datetimes to TIMESTAMPTZ itself (aware_utc only refuses naive ones);
# for DATETIME(6), a UTC literal is what PyMySQL escapes fastest.
_postgres_rows: Final = _native_decimal_rows(aware_utc)
_mysql_rows: Final = _native_decimal_rows(mysql_time_text)


CompiledUpsert = CompiledRows[Record]
_ENCODERS: Final[dict[str, Encoder[Record]]] = {
    "sqlite": _sqlite_rows,
    "postgresql": _postgres_rows,
    "mysql": _mysql_rows,
}


def compile_upsert(dialect: Dialect) -> CompiledUpsert:
    """Compile the upsert for a connected ``dialect`` (MariaDB's syntax depends on the server)."""
    return compile_rows(build_upsert(dialect.name), dialect, COLUMNS, _ENCODERS, default="mysql")


def fits(r: Record) -> bool:
    """The fast check: true for every sane record, in a few comparisons."""
    return (
        max(len(r.record_id), len(r.player_id), len(r.game_id), len(r.round_id)) <= ID_LENGTH
        and (r.parent_round_id is None or len(r.parent_round_id) <= ID_LENGTH)
        and max(len(r.currency), len(r.status)) <= CODE_LENGTH
        and r.revision <= MAX_REVISION
        and max(
            r.bet_amount.adjusted(),
            r.refund_amount.adjusted(),
            r.payout_amount.adjusted(),
            r.net_amount.adjusted(),
        )
        < _MONEY_DIGITS
        and "\x00"
        not in f"{r.record_id}{r.player_id}{r.game_id}{r.round_id}"
        f"{r.parent_round_id or ''}{r.currency}{r.status}"
    )


def unstorable(record: Record) -> str | None:
    """Why the warehouse columns cannot hold ``record``, or None when they can."""
    if fits(record):
        return None
    for name in (*_ID_FIELDS, *_CODE_FIELDS):
        value = getattr(record, name)
        if value is None:
            continue
        limit = ID_LENGTH if name in _ID_FIELDS else CODE_LENGTH
        if len(value) > limit:
            return (
                f"{name}: {len(value)} characters, more than the warehouse column holds ({limit})"
            )
        if "\x00" in value:
            return f"{name}: contains a NUL character, which the warehouse cannot store"
    if record.revision > MAX_REVISION:
        return f"revision: {record.revision} exceeds the warehouse maximum ({MAX_REVISION})"
    for name in _AMOUNT_FIELDS:
        if getattr(record, name).adjusted() >= _MONEY_DIGITS:
            return f"{name}: more than {_MONEY_DIGITS} integer digits, beyond NUMERIC(30,4)"
    return None  # pragma: no cover - fits and the checks above test the same limits


def split_unstorable(batch: list[Record]) -> tuple[list[Record], list[tuple[Record, str]]]:
    """(records the columns hold, [(record, reason)] for the others); one pass when all fit."""
    if all(map(fits, batch)):
        return batch, []
    reasons = [(record, unstorable(record)) for record in batch]
    fitting = [record for record, reason in reasons if reason is None]
    return fitting, [(record, reason) for record, reason in reasons if reason is not None]
