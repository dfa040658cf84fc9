"""What ``recordsync verify`` finds: the platform's records of a range against the warehouse's.

Pure: no I/O.  ``sync.verify`` reads the platform's pages and the warehouse's rows (for the
command, or for the holder it handed the run to) and hands them here, a page at a time; this
module decides what each pair means, keeps the tally of each UTC day, and writes the findings
as the plain document both sides print or hand back (``verify_document``).

The kinds of difference (spec: Records endpoints, "the client keeps, per record_id, the highest
revision"):

- ``missing``: the platform lists the record, the warehouse has no row for it;
- ``behind``: the warehouse holds a lower revision than the platform's;
- ``different``: the same revision, but some field differs.  A revision is immutable on the
  platform, so this is a damaged row, not a change still on its way;
- ``warehouse_only``: a row the warehouse holds for the range that the platform does not list;
- ``ahead``: the warehouse holds a higher revision than the platform's page showed (the tail
  stored a newer change after the snapshot was taken): newer, not an error.

Fields are compared as values: money as exact ``Decimal`` (``1.50`` equals ``1.5``, and no
float ever takes part), times as instants (the same moment in any time zone is equal), the
unknown members by their values (``core.extra_fields``: a backend may respell them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum
from typing import Any, Final

from recordsync.core.extra_fields import same_extra
from recordsync.core.models import Record

# How many record ids of each kind a day keeps to show; the counts are always complete.
EXAMPLES_PER_KIND: Final = 5

# Every field of a record but its key: what "field by field" compares.
COMPARED_FIELDS: Final = tuple(name for name in Record.__struct_fields__ if name != "record_id")


class Difference(StrEnum):
    """A kind of difference between the platform and the warehouse (see the module docstring)."""

    MISSING = "missing"
    BEHIND = "behind"
    DIFFERENT = "different"
    WAREHOUSE_ONLY = "warehouse_only"
    AHEAD = "ahead"


# The kinds that mean the warehouse is wrong: ``verify`` exits 1 when any is found.
FAULTS: Final = frozenset({Difference.MISSING, Difference.BEHIND, Difference.DIFFERENT})
# The kinds ``--repair`` writes from what the platform returned; warehouse-only rows are
# reported and never deleted, rows ahead are newer than the platform's page.
REPAIRABLE: Final = FAULTS


def differing_fields(platform: Record, stored: Record) -> tuple[str, ...]:
    """The fields whose values differ (``Decimal`` and aware ``datetime`` compare by value)."""
    return tuple(
        name
        for name in COMPARED_FIELDS
        if (
            not same_extra(platform.extra_fields, stored.extra_fields)
            if name == "extra_fields"
            else getattr(platform, name) != getattr(stored, name)
        )
    )


def classify(platform: Record, stored: Record | None) -> Difference | None:
    """What the warehouse's row ``stored`` is to the platform's ``platform``; None when equal."""
    if stored is None:
        return Difference.MISSING
    if stored.revision < platform.revision:
        return Difference.BEHIND
    if stored.revision > platform.revision:
        return Difference.AHEAD
    return Difference.DIFFERENT if differing_fields(platform, stored) else None


@dataclass
class DayTally:
    """One UTC day of the range: rows on each side and each kind of difference."""

    day: date
    platform_rows: int = 0
    warehouse_rows: int = 0
    counts: dict[Difference, int] = field(default_factory=lambda: dict.fromkeys(Difference, 0))
    examples: dict[Difference, list[str]] = field(
        default_factory=lambda: {kind: [] for kind in Difference}
    )
    repaired: int = 0

    @property
    def faults(self) -> int:
        return sum(self.counts[kind] for kind in FAULTS)

    def note(self, kind: Difference, record_id: str) -> None:
        self.counts[kind] += 1
        if len(self.examples[kind]) < EXAMPLES_PER_KIND:
            self.examples[kind].append(record_id)

    def add(self, piece: DayTally) -> None:
        """A piece of the same day, compared apart (a day too big to hold at once)."""
        self.platform_rows += piece.platform_rows
        self.warehouse_rows += piece.warehouse_rows
        self.repaired += piece.repaired
        for kind in Difference:
            self.counts[kind] += piece.counts[kind]
            room = EXAMPLES_PER_KIND - len(self.examples[kind])
            self.examples[kind].extend(piece.examples[kind][:room])


@dataclass(frozen=True)
class PageFindings:
    """What one page of the platform's records showed, and what a repair would write."""

    differences: tuple[tuple[Difference, str], ...]
    # The platform's records of the missing and behind rows: the guarded upsert takes them.
    newer: tuple[Record, ...]
    # The platform's records of the rows differing at the same revision (see ``Warehouse.
    # repair_records``: rewritten only while the warehouse still holds that revision).
    same_revision: tuple[Record, ...]


def compare_page(platform: Sequence[Record], stored: Mapping[str, Record]) -> PageFindings:
    """Compare a page of the platform's records with the warehouse's rows of the same ids.

    A page may list a record twice (spec: a snapshot page is not deduplicated); the highest
    revision listed is the platform's.
    """
    newest: dict[str, Record] = {}
    for record in platform:
        known = newest.get(record.record_id)
        if known is None or record.revision > known.revision:
            newest[record.record_id] = record
    differences: list[tuple[Difference, str]] = []
    newer: list[Record] = []
    same_revision: list[Record] = []
    for record_id, record in newest.items():
        kind = classify(record, stored.get(record_id))
        if kind is None:
            continue
        differences.append((kind, record_id))
        if kind is Difference.DIFFERENT:
            same_revision.append(record)
        elif kind in REPAIRABLE:
            newer.append(record)
    return PageFindings(tuple(differences), tuple(newer), tuple(same_revision))


def warehouse_only(listed: Iterable[str], stored: Iterable[str]) -> list[str]:
    """The warehouse's ids of a range that the platform did not list, sorted."""
    return sorted(set(stored) - set(listed))


@dataclass
class VerifyResult:
    """The whole run: one tally per UTC day, in order."""

    days: list[DayTally]
    repair: bool

    def total(self, kind: Difference) -> int:
        return sum(day.counts[kind] for day in self.days)

    @property
    def platform_rows(self) -> int:
        return sum(day.platform_rows for day in self.days)

    @property
    def warehouse_rows(self) -> int:
        return sum(day.warehouse_rows for day in self.days)

    @property
    def repaired(self) -> int:
        return sum(day.repaired for day in self.days)

    @property
    def faults(self) -> int:
        return sum(day.faults for day in self.days)

    @property
    def clean(self) -> bool:
        """Nothing missing, behind or different (``verify`` exits 0)."""
        return self.faults == 0

    def examples(self, kind: Difference, limit: int = EXAMPLES_PER_KIND) -> list[str]:
        """The first differing record ids of ``kind`` over the whole range."""
        found: list[str] = []
        for day in self.days:
            found.extend(day.examples[kind])
        return found[:limit]


def _row(day: DayTally) -> dict[str, Any]:
    return {
        "day": day.day.isoformat(),
        "platform_rows": day.platform_rows,
        "warehouse_rows": day.warehouse_rows,
        **{kind.value: day.counts[kind] for kind in Difference},
        "repaired": day.repaired,
    }


def _totals(result: VerifyResult) -> dict[str, Any]:
    return {
        "platform_rows": result.platform_rows,
        "warehouse_rows": result.warehouse_rows,
        **{kind.value: result.total(kind) for kind in Difference},
        "repaired": result.repaired,
    }


def verify_document(
    result: VerifyResult, merchant_id: str, start: datetime, end: datetime
) -> dict[str, Any]:
    """The findings as plain data: what ``recordsync verify --format json`` prints, and what a
    holder that ran the verify hands back to the command that asked."""
    return {
        "merchant_id": merchant_id,
        "created_from": start.isoformat(),
        "created_to": end.isoformat(),
        "repair": result.repair,
        "clean": result.clean,
        "days": [_row(day) for day in result.days],
        "totals": _totals(result),
        "examples": {kind.value: result.examples(kind) for kind in Difference},
    }
