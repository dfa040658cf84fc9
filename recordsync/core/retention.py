"""Where a sweep of ``record_revisions`` stands, and what one batch of it did: values the
sync's retention job and the warehouse pass between them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RevisionKey:
    """A row of ``record_revisions`` within one merchant (the table's key order)."""

    record_id: str
    revision: int


@dataclass(frozen=True, slots=True)
class PrunedBatch:
    """One batch of a sweep: the last key it read (None: the sweep reached the end), how
    many keys it read and how many expired rows it deleted."""

    last: RevisionKey | None
    scanned: int
    deleted: int
