"""SQLite: a page as two prepared upserts run by ``executemany``, no stage.

SQLite has one writer, our own process, so every microsecond of a page's transaction is
the ceiling of the whole ingest (bench/README.md, W7).  The stage of ``pages.writer`` cost it
a temporary table filled, sorted and emptied for every page; here each revision is encoded
once into one tuple, and the same tuple is bound to both statements: their numbered
parameters (``?1`` .. ``?23``) pick the columns each table takes, so nothing is encoded twice.
sqlite3 loops over the rows in C.

The guards are those of ``pages.writer``, spelled in SQLite's upsert syntax:

- ``records``: ``ON CONFLICT (merchant_id, record_id) DO UPDATE SET ... WHERE
  records.revision < excluded.revision``: a stored revision never goes down;
- ``record_revisions``: a stored revision is never rewritten, except that an unknown
  ``sequence`` and ``changed_at`` are filled in.

Rows go in ordered by key, as the stage's ``ORDER BY`` had them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Connection

from recordsync.warehouse.pages.staging import StagedRevision
from recordsync.warehouse.schema import record_revisions, records
from recordsync.warehouse.types import money_units, sqlite_time_text, sqlite_time_texts

_SHARED: Final = ("merchant_id", "synced_at")  # the same for every row of a page
# The tuple each revision becomes: record_revisions' own columns (record_id .. changed_at),
# the integer units records also has, then the two shared values; a column's parameter
# number is its place here.
_ROW: Final = (
    *(c.name for c in record_revisions.columns if c.name not in _SHARED),
    "bet_units",
    "refund_units",
    "payout_units",
    "net_units",
    *_SHARED,
)
_NUMBER: Final = {name: number for number, name in enumerate(_ROW, start=1)}
_RECORD_KEY: Final = ("merchant_id", "record_id")
_REVISION_KEY: Final = ("merchant_id", "record_id", "revision")


def _insert(table: Any) -> str:
    names = [column.name for column in table.columns]
    if set(names) - set(_ROW):
        raise RuntimeError(f"{table.name} has columns the SQLite page writer does not fill")
    values = ", ".join(f"?{_NUMBER[name]}" for name in names)
    return f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({values})"  # noqa: S608 - names


def records_upsert() -> str:
    """The page's top rows into ``records``; a stored revision never goes down."""
    key = ", ".join(_RECORD_KEY)
    updated = [c.name for c in records.columns if c.name not in {*_RECORD_KEY, "revision"}]
    sets = ", ".join(f"{name} = excluded.{name}" for name in [*updated, "revision"])
    return (
        f"{_insert(records)} ON CONFLICT ({key}) DO UPDATE SET {sets} "
        "WHERE records.revision < excluded.revision"
    )


def history_upsert() -> str:
    """The page's revisions into ``record_revisions``; only unknown sequences are filled."""
    key = ", ".join(_REVISION_KEY)
    return (
        f"{_insert(record_revisions)} ON CONFLICT ({key}) DO UPDATE SET "
        "sequence = excluded.sequence, changed_at = excluded.changed_at "
        "WHERE record_revisions.sequence IS NULL AND excluded.sequence IS NOT NULL"
    )


# The highest parameter number each statement uses must be the tuple's length (sqlite3
# checks the count), which the merchant and synced_at, bound by both, make sure of.
if max(_NUMBER[c.name] for c in records.columns) != len(_ROW) or max(
    _NUMBER[c.name] for c in record_revisions.columns
) != len(_ROW):
    raise RuntimeError("the SQLite page writer's row no longer ends with a shared column")


class SQLitePageWriter:
    """Writes a page's staged revisions into ``records`` and ``record_revisions``.

    Built once per warehouse; ``write`` runs inside the caller's transaction.
    """

    def __init__(self) -> None:
        self._records = records_upsert()
        self._history = history_upsert()

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
        if not staged:
            return
        rows = encode(staged, merchant_id, sqlite_time_text(synced_at))
        tops = [row for row, item in zip(rows, staged, strict=True) if item.is_top]
        tops.sort(key=_record_key)
        history = [row for row, item in zip(rows, staged, strict=True) if item.in_history]
        history.sort(key=_revision_key)
        if tops:
            conn.exec_driver_sql(self._records, tops)
        if history:
            conn.exec_driver_sql(self._history, history)


def encode(
    staged: Sequence[StagedRevision], merchant_id: str, synced_at: str
) -> list[tuple[Any, ...]]:
    """One tuple per revision in ``_ROW`` order: times and amounts as SQLite keeps them.

    The times of the whole page are rendered first, column by column, in one call each
    (``types.sqlite_time_texts``): a time at a time cost more than the rest of the row."""
    records = [item.record for item in staged]
    created = sqlite_time_texts([r.created_at for r in records])
    settled = sqlite_time_texts([r.settled_at for r in records])
    updated = sqlite_time_texts([r.updated_at for r in records])
    changed = sqlite_time_texts([item.changed_at for item in staged])
    u = money_units
    return [
        (
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
            created_at,
            settled_at,
            updated_at,
            sequence,
            changed_at,
            r.extra_fields,
            u(r.bet_amount),
            u(r.refund_amount),
            u(r.payout_amount),
            u(r.net_amount),
            merchant_id,
            synced_at,
        )
        for (r, sequence, _, _, _), created_at, settled_at, updated_at, changed_at in zip(
            staged, created, settled, updated, changed, strict=True
        )
    ]


def _record_key(row: tuple[Any, ...]) -> str:
    key: str = row[0]
    return key


def _revision_key(row: tuple[Any, ...]) -> tuple[str, int]:
    return row[0], row[1]
