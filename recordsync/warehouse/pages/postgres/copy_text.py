"""A page's staged revisions in PostgreSQL's ``COPY`` text format, one buffer per page.

Why text and not binary (as until issue 14): formatting a Decimal or a datetime into
PostgreSQL's binary form is done per value by the driver's row formatter, about 9 us of our
CPU a record for the stage's 19 columns on this project's machine, the largest share of the
PostgreSQL write path (bench/README.md, W9).  Here msgspec renders every amount and time of a
page to text in one C call (``to_builtins``: ``12.3400``, ``2024-03-01T00:01:00.123000Z``),
each row is one ``str.join`` and the page one more: about 2 us a record, the server parsing
the text instead (bench/README.md, section 7, "fourth pass").

The format (PostgreSQL, COPY, "Text Format"): columns separated by a tab, rows ended by a
newline, NULL as ``\\N``; a backslash, tab, newline or carriage return inside a value must be
escaped with a backslash.  The platform's identifiers never hold those, so a page is first
joined as it is and the result checked: exactly one tab fewer than the columns per row, one
newline per row, no carriage return, and no backslash but the ``\\N`` of each NULL.  Any
value holding one of the four breaks a count, and only then is the page joined again with
every text value escaped.  NUL, which no PostgreSQL text holds, never gets here: such a
record is quarantined first (``upsert.unstorable``).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Final

import msgspec

from recordsync.warehouse.pages.staging import STAGE_COLUMNS, StagedRevision

NULL: Final = "\\N"
_TABS_PER_ROW: Final = len(STAGE_COLUMNS) - 1
_ESCAPES: Final = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def copy_text(batch: Sequence[StagedRevision]) -> bytes:
    """``batch`` as the body of ``COPY ... FROM STDIN (FORMAT text, ENCODING 'UTF8')``, its
    columns in ``STAGE_COLUMNS`` order."""
    nulls = _nulls_of_zoned_times(batch)
    text = _joined(batch)
    if not _nothing_to_escape(text, len(batch), nulls):
        text = _joined([_escaped(item) for item in batch])
    return text.encode()


def _joined(batch: Sequence[StagedRevision]) -> str:
    """One comprehension builds every row (it runs for every record synced); msgspec turns
    the amounts and times in them to text at once, in C."""
    n = NULL
    rows: list[list[str]] = msgspec.to_builtins(
        [
            (
                r.record_id,
                str(r.revision),
                r.player_id,
                r.game_id,
                r.currency,
                r.round_id,
                n if r.parent_round_id is None else r.parent_round_id,
                r.bet_amount,
                r.refund_amount,
                r.payout_amount,
                r.net_amount,
                r.status,
                r.created_at,
                n if r.settled_at is None else r.settled_at,
                r.updated_at,
                n if r.extra_fields is None else r.extra_fields,
                n if sequence is None else sequence,
                n if changed_at is None else changed_at,
                "t" if is_top else "f",
                "t" if in_history else "f",
            )
            for r, sequence, changed_at, is_top, in_history in batch
        ]
    )
    return "".join(["\t".join(row) + "\n" for row in rows])


def _nothing_to_escape(text: str, rows: int, nulls: int) -> bool:
    """True when no value in ``text`` holds a character the format escapes (see above).

    Amounts, times, revisions and flags never do, and each of the ``nulls`` NULLs brings
    exactly one backslash: so any backslash, tab or newline beyond those counts sits inside
    a value.
    """
    return (
        text.count("\n") == rows
        and text.count("\t") == _TABS_PER_ROW * rows
        and text.count("\\") == nulls
        and "\r" not in text
    )


def _escaped(item: StagedRevision) -> StagedRevision:
    """``item`` with every text value escaped for the format (the rare page's slow path)."""
    r = item.record
    record = msgspec.structs.replace(
        r,
        record_id=_escape(r.record_id),
        player_id=_escape(r.player_id),
        game_id=_escape(r.game_id),
        currency=_escape(r.currency),
        round_id=_escape(r.round_id),
        parent_round_id=None if r.parent_round_id is None else _escape(r.parent_round_id),
        status=_escape(r.status),
        extra_fields=None if r.extra_fields is None else _escape(r.extra_fields),
    )
    sequence = None if item.sequence is None else _escape(item.sequence)
    return item._replace(record=record, sequence=sequence)


def _escape(value: str) -> str:
    return value.translate(_ESCAPES)


_RECORD: Final = attrgetter("record")
_PARENT: Final = attrgetter("parent_round_id")
_EXTRA: Final = attrgetter("extra_fields")
_SEQUENCE: Final = attrgetter("sequence")
_CREATED: Final = attrgetter("created_at")
_UPDATED: Final = attrgetter("updated_at")
_SETTLED: Final = attrgetter("settled_at")
_CHANGED: Final = attrgetter("changed_at")
_ZONE: Final = attrgetter("tzinfo")


def _nulls_of_zoned_times(batch: Sequence[StagedRevision]) -> int:
    """The NULLs ``batch`` writes; refuses a time without a zone, which would be read in the
    session's zone (the binary path refused it too: ``types.aware_utc``; every time parsed
    from the platform has one).

    Column by column, by ``map`` over ``attrgetter``: the loops run in C, a tenth of a
    microsecond a record where one comprehension testing each value cost four.
    """
    records = list(map(_RECORD, batch))
    settled = list(map(_SETTLED, records))
    changed = list(map(_CHANGED, batch))
    times = [*map(_CREATED, records), *map(_UPDATED, records)]
    times += filter(None, settled)
    times += filter(None, changed)
    if None in set(map(_ZONE, times)):
        raise ValueError("refusing to store a naive datetime: its zone is unknown")
    return (
        list(map(_PARENT, records)).count(None)
        + settled.count(None)
        + list(map(_EXTRA, records)).count(None)
        + list(map(_SEQUENCE, batch)).count(None)
        + changed.count(None)
    )
