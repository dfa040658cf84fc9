"""A snapshot page's stage rows in PostgreSQL's ``COPY`` CSV format, encoded by msgspec in C.

Most pages a backfill writes are snapshot pages: every row is a record on its own, with no
sequence or change time, bound for ``records`` and, alike for the whole page, for the history
or not.  For those the whole page is rendered without running Python code per record: each
record becomes a tuple (``msgspec.structs.astuple``), then a JSON array (msgspec, in C; its
amounts as exact decimal strings, its times in RFC 3339), whose brackets are cut off, and the
page is one ``bytes.join`` with the four shared stage columns as the separator.  That costs
about 1.8 us a record where the COPY text rows cost 2.1 to 2.5 (bench/README.md, section 7).

Why that JSON is the CSV PostgreSQL reads (PostgreSQL, COPY, "CSV Format", with ``NULL
'null'``): a JSON string without a backslash holds no quote, control character or backslash,
so it is a quoted CSV value as it stands; integers and ``true``/``false`` are unquoted values,
and an unquoted ``null`` is the NULL this COPY names (a quoted "null" stays the text).  So a
page is taken only when its bytes hold no backslash and exactly the commas of its columns: a
value holding a quote, a control character, a backslash or a comma breaks one of the two, and
the page goes the COPY text way (``copy_text``), which escapes.  A time without a zone is
refused, as there (it would be read in the session's zone).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Final

import msgspec
from msgspec.structs import astuple

from recordsync.core.models import Record
from recordsync.warehouse.pages.staging import STAGE_COLUMNS, StagedRevision

# The stage columns after the record's own, for a snapshot row: sequence, changed_at,
# is_top, in_history.
_RECORD_COLUMNS: Final = len(Record.__struct_fields__)
_SHARED: Final = {
    True: b",null,null,true,true\n",
    False: b",null,null,true,false\n",
}
_COMMAS_PER_ROW: Final = len(STAGE_COLUMNS) - 1
if STAGE_COLUMNS[:_RECORD_COLUMNS] != Record.__struct_fields__ or STAGE_COLUMNS[
    _RECORD_COLUMNS:
] != ("sequence", "changed_at", "is_top", "in_history"):
    raise RuntimeError("the stage's columns changed: update copy_csv's rows")

_RECORD: Final = itemgetter(0)
_SHAPE: Final = itemgetter(1, 2, 3, 4)  # sequence, changed_at, is_top, in_history
_BRACKETS_CUT: Final = itemgetter(slice(1, -1))
_ZONE: Final = attrgetter("tzinfo")
_CREATED: Final = attrgetter("created_at")
_UPDATED: Final = attrgetter("updated_at")
_SETTLED: Final = attrgetter("settled_at")
_encode: Final = msgspec.json.Encoder().encode


def snapshot_csv(batch: Sequence[StagedRevision]) -> bytes | None:
    """``batch`` as the body of ``COPY ... FROM STDIN (FORMAT csv, NULL 'null')``, its columns
    in ``STAGE_COLUMNS`` order; None when it is not a snapshot page of plain values (the
    caller then writes it as COPY text)."""
    shapes = set(map(_SHAPE, batch))
    if len(shapes) != 1:
        return None
    ((sequence, changed_at, is_top, in_history),) = shapes
    if sequence is not None or changed_at is not None or is_top is not True:
        return None
    records = list(map(_RECORD, batch))
    _refuse_naive_times(records)
    shared = _SHARED[bool(in_history)]
    rows = map(_BRACKETS_CUT, map(_encode, map(astuple, records)))
    body = shared.join(rows) + shared
    if b"\\" in body or body.count(b",") != _COMMAS_PER_ROW * len(records):
        return None
    return body


def _refuse_naive_times(records: list[Record]) -> None:
    """Every time parsed from the platform has a zone; one without would be read in the
    session's zone, so it is refused (as ``copy_text`` and ``types.aware_utc`` do)."""
    times = chain(
        map(_CREATED, records), map(_UPDATED, records), filter(None, map(_SETTLED, records))
    )
    if None in set(map(_ZONE, times)):
        raise ValueError("refusing to store a naive datetime: its zone is unknown")
