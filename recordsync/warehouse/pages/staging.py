"""What one page writes, encoded once: the staged revisions and their row encoders.

A page used to be encoded and sent twice, once for ``records`` (the highest revision per
record) and once more for ``record_revisions`` (every revision seen), and on the benchmarks'
profile that encoding and sending was most of the write path (bench/README.md, W1).  Now each
revision a page brings is encoded once into a temporary stage table, flagged with where it
goes, and both tables are filled from the stage by ``INSERT ... SELECT`` (``pages.writer``):

- ``is_top``: the page's highest revision of its record, the one ``records`` may take
  (``upsert.collapse``), still under the revision guard;
- ``in_history``: a revision for ``record_revisions`` (``revisions.seen_revisions``), absent
  when the history is switched off.

``stage_page`` is pure; ``copy_text`` turns the staged revisions into the rows of the stage
table defined here, in ``STAGE_COLUMNS`` order.  Money goes in as the exact decimal; the
server derives the integer units of ``records`` from it (``pages.writer``).  Only PostgreSQL
stages pages now (SQLite: ``pages.sqlite``; MariaDB: ``pages.mariadb``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple

from sqlalchemy import Boolean, Column, MetaData, Table, Text
from sqlalchemy.dialects import postgresql

from recordsync.core.models import Record, RecordChange
from recordsync.warehouse.pages.revisions import seen_revisions
from recordsync.warehouse.schema import record_revisions


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


# The stage: a session's temporary table, never migrated (created by ``pages.writer``).
STAGE_TABLE: Final = "recordsync_stage"
stage_metadata = MetaData()
# A revision's columns as record_revisions has them, less the two every row of a page shares
# (bound once per merge), plus what ``records`` also needs and where each row goes.
# In the order of the record's own fields, then the change's: the order the COPY rows come in.
# ``extra_fields`` as the server's own JSON type, so that it goes from the stage to the tables
# as JSON (the tables' column type reads it back as text).
_SHARED: Final = ("merchant_id", "synced_at")
_ORDER: Final = (*Record.__struct_fields__, "sequence", "changed_at")


def _stage_type(name: str) -> Any:
    if name == "extra_fields":
        return Text().with_variant(postgresql.JSONB(), "postgresql")
    return record_revisions.c[name].type


if set(_ORDER) != {c.name for c in record_revisions.columns} - set(_SHARED):
    raise RuntimeError("record_revisions changed: update the stage's columns")
stage = Table(
    STAGE_TABLE,
    stage_metadata,
    *(Column(name, _stage_type(name), nullable=True) for name in _ORDER),
    Column("is_top", Boolean(create_constraint=False), nullable=False),
    Column("in_history", Boolean(create_constraint=False), nullable=False),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DELETE ROWS",
)
STAGE_COLUMNS: Final = tuple(column.name for column in stage.columns)
