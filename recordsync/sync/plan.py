"""Pure decisions of the sync: where the snapshot ends, how it is cut into windows, what a page
of changes means for the state.  No I/O here, so every boundary rule is tested directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from recordsync.models import RecordChange
from recordsync.state import Window
from recordsync.times import MILLISECOND, ceil_ms, floor_ms

MAX_WINDOW = timedelta(hours=24)

# How far past the anchor the snapshot reaches.  The anchor's ``projection_as_of`` is the
# platform's own time at the position where the tail starts: every change before the anchor
# happened at or before it, so every record created before the anchor has
# ``created_at <= projection_as_of``.  Ending the snapshot one millisecond after the anchor's
# millisecond covers a record created in that very millisecond (``created_to`` is exclusive).
# The extra overlap guards against a platform whose ``created_at`` is stamped by another host
# a little after the projection's time: overlap is harmless (highest revision wins, and the
# tail carries everything after the anchor anyway), a gap is not.
DEFAULT_SNAPSHOT_OVERLAP = timedelta(seconds=60)


def snapshot_end(anchor_at: datetime, overlap: timedelta = DEFAULT_SNAPSHOT_OVERLAP) -> datetime:
    """Exclusive end of the snapshot for an anchor taken at platform time ``anchor_at``."""
    if overlap < timedelta(0):
        raise ValueError("a negative overlap would open a gap before the anchor")
    return floor_ms(anchor_at) + MILLISECOND + overlap


def plan_windows(start: datetime, end: datetime) -> list[Window]:
    """Cut ``[start, end)`` into windows of at most 24 h aligned on UTC midnights.

    Aligning on days makes the plan readable in ``status`` (one window is one day) and means
    only the first and last windows are shorter than 24 h.  Bounds are taken to whole
    milliseconds outward (the records endpoint takes at most millisecond precision), so the
    windows cover at least the range asked for, never less.
    """
    start = floor_ms(start.astimezone(UTC))
    end = ceil_ms(end.astimezone(UTC))
    windows: list[Window] = []
    cursor = start
    while cursor < end:
        next_midnight = datetime(cursor.year, cursor.month, cursor.day, tzinfo=UTC) + MAX_WINDOW
        window_end = min(next_midnight, end)
        windows.append(Window(cursor, window_end))
        cursor = window_end
    return windows


def highest_sequence(changes: Iterable[RecordChange]) -> str | None:
    """The largest sequence of a page, compared as integers (they may exceed 64 bits)."""
    best: str | None = None
    for change in changes:
        if best is None or int(change.sequence) > int(best):
            best = change.sequence
    return best


def describe_windows(windows: Sequence[Window]) -> str:
    if not windows:
        return "no windows"
    return f"{len(windows)} windows from {windows[0].start:%Y-%m-%d} to {windows[-1].end:%Y-%m-%d}"
