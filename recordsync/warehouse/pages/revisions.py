"""The revision history: every revision recordsync has seen, stored once (``record_revisions``).

``records`` keeps only the highest revision of a round; finance and support also ask how a
round got there (spec: Record, "each payout or refund arrival yields a new revision"; Record
status).  So every page also appends the revisions it brought, in the same transaction as the
records and the cursor (``pages.writer`` writes both from one stage).

What a page brings (pure, ``seen_revisions``):

- a change page: every change, each with its ``sequence`` and ``changed_at`` (spec: Record
  change), including the lower revisions the records upsert collapses away;
- a snapshot page (or a change page handed over without its changes): its records, with no
  sequence and no change time, since a snapshot does not say when a revision happened.

A revision already stored is never duplicated and never rewritten, with one exception chosen
on purpose: a revision first seen in a snapshot and later in the change stream gets the
change's ``sequence`` and ``changed_at`` filled in (they were unknown, not different).
Records the columns cannot hold are quarantined (``upsert.unstorable``); their revisions are
left out of the history too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Final, NamedTuple

from recordsync.core.models import Record, RecordChange
from recordsync.warehouse.pages.upsert import fits
from recordsync.warehouse.schema import record_revisions
from recordsync.warehouse.types import (
    CURSOR_LENGTH,
)

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
