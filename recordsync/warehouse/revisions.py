"""The revision history: every revision recordsync has seen, stored once (``record_revisions``).

``records`` keeps only the highest revision of a round; finance and support also ask how a
round got there (spec: Record, "each payout or refund arrival yields a new revision"; Record
status).  So every page also appends the revisions it brought, in the same transaction as the
records upsert and the cursor: one more executemany per page.

What a page brings (pure, ``seen_revisions``):

- a change page: every change, each with its ``sequence`` and ``changed_at`` (spec: Record
  change), including the lower revisions the records upsert collapses away;
- a snapshot page (or a change page handed over without its changes): its records, with no
  sequence and no change time, since a snapshot does not say when a revision happened.

A revision already stored is never duplicated and never rewritten, with one exception chosen
on purpose: a revision first seen in a snapshot and later in the change stream gets the
change's ``sequence`` and ``changed_at`` filled in (they were unknown, not different).  The
statement is an upsert for that reason: SQLite and PostgreSQL ``ON CONFLICT DO UPDATE ...
WHERE record_revisions.sequence IS NULL``; MariaDB ``ON DUPLICATE KEY UPDATE`` with both
assignments guarded on the old sequence (``changed_at`` first: MariaDB assigns left to right).
MariaDB's ``INSERT IGNORE`` is avoided: it would also turn real errors into warnings.

Records the columns cannot hold are quarantined by the records upsert (``upsert.unstorable``);
their revisions are left out of the history too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple

from sqlalchemy import func
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.dml import Insert

from recordsync.models import Record, RecordChange
from recordsync.warehouse.compiled import CompiledRows, Encoder, compile_rows
from recordsync.warehouse.schema import record_revisions
from recordsync.warehouse.types import (
    CURSOR_LENGTH,
    MYSQL_FAMILY,
    aware_utc,
    mysql_time_text,
    sqlite_time_text,
)
from recordsync.warehouse.upsert import fits

_KEY: Final = ("merchant_id", "record_id", "revision")
COLUMNS: Final = tuple(column.name for column in record_revisions.columns)


class SeenRevision(NamedTuple):
    """One revision as a page showed it; no sequence when it came from a snapshot."""

    record: Record
    sequence: str | None
    changed_at: datetime | None


def seen_revisions(
    records: Iterable[Record], changes: Sequence[RecordChange] = ()
) -> list[SeenRevision]:
    """The revisions a page brings, once each, ordered by (record_id, revision).

    From ``changes`` when there are any, else from ``records`` (which must already fit the
    columns: the records upsert checked them).  The same revision twice in one page (the
    stream may repeat changes) keeps its first appearance.  The order makes concurrent
    writers lock rows in the same order, as the records upsert does.
    """
    seen: dict[tuple[str, int], SeenRevision] = {}
    if changes:
        for change in changes:
            record = change.record
            key = (record.record_id, record.revision)
            if key not in seen and fits(record):
                # A sequence too long for the column (4096 digits) is kept out, not fatal.
                sequence = change.sequence if len(change.sequence) <= CURSOR_LENGTH else None
                seen[key] = SeenRevision(record, sequence, change.changed_at)
    else:
        for record in records:
            seen.setdefault((record.record_id, record.revision), SeenRevision(record, None, None))
    return [seen[key] for key in sorted(seen)]


def build_revision_insert(backend: str) -> Insert:
    """Insert new revisions; fill in sequence and changed_at only where they were unknown."""
    table = record_revisions
    if backend in MYSQL_FAMILY:
        statement = mysql.insert(table)
        incoming = statement.inserted
        unknown = table.c.sequence.is_(None)
        return statement.on_duplicate_key_update(
            [
                ("changed_at", func.if_(unknown, incoming.changed_at, table.c.changed_at)),
                ("sequence", func.coalesce(table.c.sequence, incoming.sequence)),
            ]
        )
    if backend in {"postgresql", "sqlite"}:
        dialect_insert = postgresql.insert if backend == "postgresql" else sqlite.insert
        upsert = dialect_insert(table)
        return upsert.on_conflict_do_update(
            index_elements=[table.c[name] for name in _KEY],
            set_={"sequence": upsert.excluded.sequence, "changed_at": upsert.excluded.changed_at},
            where=table.c.sequence.is_(None) & upsert.excluded.sequence.is_not(None),
        )
    raise ValueError(f"no revision insert for database backend {backend!r}")


def _sqlite_rows(
    merchant_id: str, batch: Sequence[SeenRevision], synced_at: datetime
) -> list[tuple[Any, ...]]:
    """SQLite: decimal strings as sent and fixed-width UTC text, as in ``upsert``."""
    t = sqlite_time_text
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
            sequence,
            None if changed_at is None else t(changed_at),
            synced,
        )
        for r, sequence, changed_at in batch
    ]


def _native_decimal_rows(time: Callable[[datetime], Any]) -> Encoder[SeenRevision]:
    """PostgreSQL and MariaDB: ``Decimal`` as it is; ``time`` encodes times."""

    def encode(
        merchant_id: str, batch: Sequence[SeenRevision], synced_at: datetime
    ) -> list[tuple[Any, ...]]:
        t = time
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
                sequence,
                None if changed_at is None else t(changed_at),
                synced,
            )
            for r, sequence, changed_at in batch
        ]

    return encode


_postgres_rows: Final = _native_decimal_rows(aware_utc)
_mysql_rows: Final = _native_decimal_rows(mysql_time_text)


CompiledRevisionInsert = CompiledRows[SeenRevision]
_ENCODERS: Final[dict[str, Encoder[SeenRevision]]] = {
    "sqlite": _sqlite_rows,
    "postgresql": _postgres_rows,
    "mysql": _mysql_rows,
}


def compile_revision_insert(dialect: Dialect) -> CompiledRevisionInsert:
    """Compile for a connected ``dialect``; checks the placeholders match ``COLUMNS``."""
    return compile_rows(
        build_revision_insert(dialect.name), dialect, COLUMNS, _ENCODERS, default="mysql"
    )
