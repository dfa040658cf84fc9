"""What one page writes, encoded once: the staged revisions and their row encoders.

A page used to be encoded and sent twice, once for ``records`` (the highest revision per
record) and once more for ``record_revisions`` (every revision seen), and on the benchmarks'
profile that encoding and sending was most of the write path (bench/README.md, W1).  Now each
revision a page brings is encoded once into a temporary stage table, flagged with where it
goes, and both tables are filled from the stage by ``INSERT ... SELECT`` (``page_writer``):

- ``is_top``: the page's highest revision of its record, the one ``records`` may take
  (``upsert.collapse``), still under the revision guard;
- ``in_history``: a revision for ``record_revisions`` (``revisions.seen_revisions``), absent
  when the history is switched off.

``stage_page`` is pure; the encoders turn staged revisions into one tuple per row in
``STAGE_COLUMNS`` order, one encoder per backend, each a single comprehension because this
runs for every record synced.  Money goes in as the exact decimal; the server derives the
integer units of ``records`` from it (``page_writer``); times as the backend stores them.
Only PostgreSQL stages pages now (SQLite: ``sqlite_pages``; MariaDB: ``mariadb_pages``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Final, NamedTuple

from sqlalchemy import Boolean, Column, MetaData, Table

from recordsync.core.models import Record, RecordChange
from recordsync.warehouse.revisions import seen_revisions
from recordsync.warehouse.schema import record_revisions
from recordsync.warehouse.types import (
    aware_utc,
    sqlite_time_text,
)


class StagedRevision(NamedTuple):
    """One revision a page brings, and which tables it is for."""

    record: Record
    sequence: str | None
    changed_at: datetime | None
    is_top: bool
    in_history: bool


_new_staged: Final = functools.partial(tuple.__new__, StagedRevision)


def stage_page(
    rows: Sequence[Record], changes: Sequence[RecordChange], *, keep_revisions: bool
) -> list[StagedRevision]:
    """Every revision the page writes, each once.

    ``rows`` are the page's records collapsed to one per record_id, all fitting the columns
    (``upsert.split_unstorable``); ``changes`` the page's changes, which give the history
    every revision with its sequence and change time (``revisions.seen_revisions``).
    """
    if not keep_revisions or not changes:
        # Every snapshot page takes this path: built by tuple.__new__ (C), not the generated
        # keyword __new__ of the named tuple, which cost more than the page's encoding.
        new = _new_staged
        return [new((row, None, None, True, keep_revisions)) for row in rows]
    tops = {(row.record_id, row.revision): row for row in rows}
    staged = []
    for seen in seen_revisions(rows, changes):
        record = seen.record
        is_top = tops.pop((record.record_id, record.revision), None) is not None
        staged.append(
            StagedRevision(record, seen.sequence, seen.changed_at, is_top=is_top, in_history=True)
        )
    # A top row with no change behind it goes to records only, as it always did.
    staged.extend(
        StagedRevision(row, None, None, is_top=True, in_history=False) for row in tops.values()
    )
    return staged


# The stage: a session's temporary table, never migrated (created by ``page_writer``).
STAGE_TABLE: Final = "recordsync_stage"
stage_metadata = MetaData()
# A revision's columns as record_revisions has them, less the two every row of a page shares
# (bound once per merge), plus what ``records`` also needs and where each row goes.
_SHARED: Final = ("merchant_id", "synced_at")
stage = Table(
    STAGE_TABLE,
    stage_metadata,
    *(
        Column(column.name, column.type, nullable=True)
        for column in record_revisions.columns
        if column.name not in _SHARED
    ),
    Column("is_top", Boolean(create_constraint=False), nullable=False),
    Column("in_history", Boolean(create_constraint=False), nullable=False),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DELETE ROWS",
)
STAGE_COLUMNS: Final = tuple(column.name for column in stage.columns)

StageEncoder = Callable[[Sequence[StagedRevision]], list[tuple[Any, ...]]]


def _encoder(time: Callable[[datetime], Any], amount: Callable[[Decimal], Any]) -> StageEncoder:
    """Rows with times encoded by ``time`` and amounts by ``amount``; one comprehension, since
    this runs for every record synced."""

    def encode(batch: Sequence[StagedRevision]) -> list[tuple[Any, ...]]:
        t = time
        m = amount
        return [
            (
                r.record_id,
                r.revision,
                r.player_id,
                r.game_id,
                r.currency,
                r.round_id,
                r.parent_round_id,
                m(r.bet_amount),
                m(r.refund_amount),
                m(r.payout_amount),
                m(r.net_amount),
                r.status,
                t(r.created_at),
                None if r.settled_at is None else t(r.settled_at),
                t(r.updated_at),
                sequence,
                None if changed_at is None else t(changed_at),
                is_top,
                in_history,
            )
            for r, sequence, changed_at, is_top, in_history in batch
        ]

    return encode


def _as_is(amount: Decimal) -> Decimal:
    return amount


# psycopg binds aware datetimes to TIMESTAMPTZ itself (aware_utc only refuses naive ones) and
# Decimal to NUMERIC.  Only PostgreSQL has a stage: SQLite writes both tables by executemany
# (``sqlite_pages``) and MariaDB by multi-row literals (``mariadb_pages``).
_ENCODERS: Final[dict[str, StageEncoder]] = {
    "postgresql": _encoder(aware_utc, _as_is),
}


def stage_encoder(backend: str) -> StageEncoder:
    """The row encoder for ``backend`` (a SQLAlchemy dialect name)."""
    try:
        return _ENCODERS[backend]
    except KeyError:
        raise ValueError(f"no stage encoder for database backend {backend!r}") from None


def time_parameter(backend: str) -> Callable[[datetime], Any]:
    """How ``backend`` takes a time bound as a statement parameter (``synced_at``)."""
    if backend == "sqlite":
        return sqlite_time_text
    return aware_utc
