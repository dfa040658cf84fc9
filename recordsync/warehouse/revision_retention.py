"""Superseded revisions expiring from ``record_revisions`` (``RECORDSYNC_REVISION_RETENTION``).

A revision expires when it was stored more than the retention ago (its ``synced_at``, against
the database's clock, never a replica's) and ``records`` holds a higher revision of its
record: the current revision is never deleted, whatever its age, and neither is the history of
a record ``records`` no longer holds.  Revisions only rise (the upsert never lowers one), so a
revision found superseded stays superseded, and the delete needs no second look.

The table is swept in its key order, a bounded batch at a time, so that no index beyond the
key is needed and no batch's work grows with the table: each batch reads the next ``limit``
keys after a position (an index range), asks ``records`` for their current revisions (by key)
and deletes the expired ones by key in a transaction of its own.  The reads lock nothing; the
delete locks only rows no page commit writes (a superseded revision) and holds them for one
short transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import Connection, and_, delete, or_, select

from recordsync.core.retention import RevisionKey
from recordsync.warehouse.database_clock import read_database_now
from recordsync.warehouse.reads import stored_revisions
from recordsync.warehouse.schema import record_revisions

# Keys read (and at most rows deleted) per batch: one short transaction's worth.
BATCH: Final = 1000
# Keys per DELETE statement: a flat OR well inside SQLite's expression depth limit.
DELETE_CHUNK: Final = 250


@dataclass(frozen=True, slots=True)
class ScannedRevision:
    key: RevisionKey
    synced_at: datetime


def expired(
    scanned: Sequence[ScannedRevision], current: Mapping[str, int], cutoff: datetime
) -> list[RevisionKey]:
    """The revisions stored before ``cutoff`` that a higher current revision supersedes."""
    return [
        row.key
        for row in scanned
        if row.synced_at < cutoff
        and row.key.record_id in current
        and current[row.key.record_id] > row.key.revision
    ]


def scan(
    conn: Connection, merchant_id: str, after: RevisionKey | None, limit: int
) -> list[ScannedRevision]:
    """The next ``limit`` revisions after ``after`` in key order (from the start: None)."""
    table = record_revisions.c
    query = select(table.record_id, table.revision, table.synced_at).where(
        table.merchant_id == merchant_id
    )
    if after is not None:
        # The redundant ``>=`` gives every planner an index range to start from.
        query = query.where(
            table.record_id >= after.record_id,
            or_(
                table.record_id > after.record_id,
                and_(table.record_id == after.record_id, table.revision > after.revision),
            ),
        )
    query = query.order_by(table.record_id, table.revision).limit(limit)
    return [
        ScannedRevision(RevisionKey(row.record_id, row.revision), row.synced_at)
        for row in conn.execute(query)
    ]


def cutoff(conn: Connection, retention: timedelta) -> datetime:
    return read_database_now(conn) - retention


def current_revisions(
    conn: Connection, merchant_id: str, scanned: Sequence[ScannedRevision]
) -> dict[str, int]:
    return stored_revisions(conn, merchant_id, {row.key.record_id for row in scanned})


def delete_keys(conn: Connection, merchant_id: str, keys: Sequence[RevisionKey]) -> int:
    """Delete exactly these rows, by key; how many went.  An OR of key equalities rather
    than a row-value IN list: every planner (MariaDB's included) turns it into key lookups,
    so the delete never scans, and never locks, more than these rows."""
    table = record_revisions.c
    deleted = 0
    for start in range(0, len(keys), DELETE_CHUNK):
        matches = [
            and_(table.record_id == key.record_id, table.revision == key.revision)
            for key in keys[start : start + DELETE_CHUNK]
        ]
        result = conn.execute(
            delete(record_revisions).where(table.merchant_id == merchant_id, or_(*matches))
        )
        deleted += int(result.rowcount)
    return deleted
