"""Pure decisions of the sync: where the snapshot ends, how it is cut into windows, what a page
of changes means for the state.  No I/O here, so every boundary rule is tested directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from recordsync.core.models import RecordChange
from recordsync.core.state import Window, WindowProgress
from recordsync.core.times import MILLISECOND, ceil_ms, floor_ms

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


def hand_out_order(pending: Iterable[WindowProgress]) -> list[WindowProgress]:
    """The order in which the snapshot workers take the pending windows: windows already
    partly read first, then the rest by expected work, the longest first.

    A window is one chain of pages read one after the other, so the job ends when its longest
    chain still running ends.  Taking the long windows first leaves the short ones (the
    partial windows at the two ends of a range) for last: the chains still running when the
    queue is empty finish soon after, and the budget's rate is not left unused while fewer
    chains remain than a round trip needs to fill it.  Duration is the measure of work (a
    window is at most 24 h; the records' density is not known before reading them).

    A window with a cursor goes first whatever its length: that cursor is valid 24 h from its
    first issue (spec, Records endpoints), so leaving it queued behind a long backlog risks a
    410 and reading the window again from its start.  There are at most as many of them as
    there were workers when the job stopped, so (at the same concurrency) they all start in
    the first round and do not change which chains end the job.  Ties go to the earlier start,
    so the order is the same on every run, except along a run of fresh windows of one length
    under 24 h that follow one another (a range cut into equal windows): there every other one
    goes first, so that the window after each one taken is still unread and its chain can carry
    its rest into it (``snapshot.chain.carry_if_spare``) and end the two on one partial page.  A
    window of 24 h can take nothing more, so whole days keep their date order.
    """
    items = list(pending)
    fresh = {(item.window.start, item.window.end) for item in items if item.cursor is None}

    def place_in_run(window: Window) -> int:
        """How many fresh windows of its length run up to ``window`` without a gap."""
        length, place, start = window.end - window.start, 0, window.start
        while (start - length, start) in fresh:
            place, start = place + 1, start - length
        return place

    def key(item: WindowProgress) -> tuple[bool, timedelta, int, datetime]:
        window = item.window
        length = window.end - window.start
        carries = item.cursor is None and length < MAX_WINDOW
        alternate = place_in_run(window) % 2 if carries else 0
        return (item.cursor is None, -length, alternate, window.start)

    return sorted(items, key=key)


def highest_sequence(changes: Iterable[RecordChange]) -> str | None:
    """The largest sequence of a page, compared as integers (they may exceed 64 bits).

    Compared by length, then text: the parser holds a sequence to ``0|[1-9][0-9]*``, so that
    is the integer order, without ``int()``, which refuses more than 4300 digits.
    """
    best: str | None = None
    for change in changes:
        sequence = change.sequence
        if best is None or (len(sequence), sequence) > (len(best), best):
            best = sequence
    return best


def describe_windows(windows: Sequence[Window]) -> str:
    if not windows:
        return "no windows"
    return f"{len(windows)} windows from {windows[0].start:%Y-%m-%d} to {windows[-1].end:%Y-%m-%d}"
