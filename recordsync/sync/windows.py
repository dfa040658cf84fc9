"""Windows planned for concurrency: enough cursor chains in flight to use the whole rate budget.

One window is one cursor chain, read one page after the other: a chain sends its next request
only once its previous page is answered and committed.  The budget lets a request start every
``(seconds + margin) / requests`` seconds, so keeping it busy takes about ``cycle / spacing``
chains in flight, where ``cycle`` is one page's round trip plus its commit.  A short history
(one or two 24 h windows) has too few chains for a long round trip, and so has the end of
any job, when the last windows are still being read.

The spec allows any window longer than 0 and at most 24 h (``GET /v1/records``), so the plan
cuts the range into more windows when more chains are needed, and a chain whose window has
much left re-splits its remaining time as it goes (``resplit``) when the measured round trip
wants more chains than are in flight.  Each window ends on a partial page, so a window more
than needed costs about half a page: pieces are only cut where each still holds a few pages.

Nothing here reads a clock: every boundary is cut from the range asked for (``history_from``
and the anchor's platform time, or a backfill's ``--from``/``--to``) and from the creation
time of a record the platform returned.  Pure functions, tested directly.
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta
from typing import Final

from recordsync.core.state import Window
from recordsync.core.times import MILLISECOND, ceil_ms, floor_ms

MAX_WINDOW: Final = timedelta(hours=24)
# The most chains one job reads at once.  The budget's default of 2 requests per second needs
# about 7 chains for a 3 s round trip; more than this only adds partial pages and threads.
MAX_CHAINS: Final = 12
# A piece cut from a window's remaining time must be expected to hold at least this many
# pages: its last page is partial (about half a page lost), and it costs one more chain start.
MIN_PAGES_PER_PIECE: Final = 3.0


def chains_needed(
    *, requests: int, seconds: float, margin: float, round_trip: float, work: float = 0.0
) -> int:
    """Chains to keep in flight so the budget never waits for one, at least 1 and at most
    ``MAX_CHAINS``.

    A request may start every ``(seconds + margin) / requests`` and a chain is busy for
    ``round_trip + work`` seconds per page (``work``: parsing and committing it); one spare
    absorbs jitter.  Only the round trip is waiting that other chains can overlap: the work
    shares one interpreter and often one writer, so with a budget faster than the work (a
    lifted limit) no more than ``round_trip / work + 2`` chains are of any use, and more would
    only hold more pages in memory.
    """
    if requests < 1 or not seconds > 0 or margin < 0 or round_trip < 0 or work < 0:
        raise ValueError("requests >= 1, seconds > 0 and margin, round_trip, work >= 0 expected")
    spacing = (seconds + margin) / requests
    chains = math.ceil((round_trip + work) / spacing) + 1
    if work > 0:
        chains = min(chains, math.ceil(round_trip / work) + 2)
    return max(1, min(MAX_CHAINS, chains))


def split_range(start: datetime, end: datetime, parts: int) -> list[Window]:
    """``[start, end)`` in ``parts`` windows of equal length (to the millisecond), or more when
    a piece would exceed 24 h, or fewer when the range has fewer milliseconds.

    The bounds must be whole milliseconds (the records endpoint takes no finer); the windows
    cover the range exactly, in order, without overlap, each longer than 0.
    """
    if start.microsecond % 1000 or end.microsecond % 1000:
        raise ValueError("window bounds must be whole milliseconds")
    if not start < end:
        raise ValueError("an empty range has no windows")
    span_ms = (end - start) // MILLISECOND
    day_ms = MAX_WINDOW // MILLISECOND
    parts = min(max(parts, 1, -(-span_ms // day_ms)), span_ms)
    bounds = [start + MILLISECOND * (span_ms * number // parts) for number in range(parts)]
    bounds.append(end)
    return [Window(left, right) for left, right in itertools.pairwise(bounds)]


def plan_for_chains(start: datetime, end: datetime, chains: int) -> list[Window]:
    """The windows of a new job: ``[start, end)`` (taken to whole milliseconds outward) in
    equal windows of at most 24 h, at least ``chains`` of them when the range allows."""
    start = floor_ms(start.astimezone(UTC))
    end = ceil_ms(end.astimezone(UTC))
    if not start < end:
        return []
    return split_range(start, end, chains)


def resplit_parts(
    *, wanted: int, in_flight: int, queued: int, pages_left: float, others_left: float
) -> int:
    """Into how many windows a chain cuts the rest of its window (1: it reads on as it is).

    ``wanted`` chains are needed, ``in_flight`` are being read (this one included) and
    ``queued`` windows wait for a reader.  The job ends when its longest chain ends, and a
    chain that ends late runs with fewer than ``wanted`` beside it: the budget idles.  So the
    rest is cut into equal shares of the job: if the pages left (``pages_left`` here,
    ``others_left`` in the other chains and the queued windows) were read by ``wanted``
    chains, each would read ``share``; this chain cuts its rest into about
    ``pages_left / share`` pieces (rounded, so a chain within half a share of the others
    reads on: a cut costs about half a page, its partial last one).  Each piece must still
    be expected to hold ``MIN_PAGES_PER_PIECE`` pages, and no more pieces are cut than
    chains are missing.
    """
    missing = wanted - in_flight - queued
    if missing <= 0 or not pages_left > 0:
        return 1
    share = max((pages_left + max(others_left, 0.0)) / wanted, MIN_PAGES_PER_PIECE)
    by_share = math.floor(pages_left / share + 0.5)
    by_pages = math.floor(pages_left / MIN_PAGES_PER_PIECE)
    return max(1, min(missing + 1, by_share, by_pages))


def resplit(window: Window, read_up_to: datetime, parts: int) -> list[Window]:
    """The remaining time of ``window`` cut into ``parts`` windows, after a page whose last
    record was created at ``read_up_to``; empty when nothing is left to cut.

    Records come in ``(created_at, record_id)`` order, so every record created before the
    millisecond of ``read_up_to`` has been read: the pieces start at that millisecond (records
    in it may be read twice; the highest revision wins) and end at the window's end.  A rest
    of one millisecond cannot be cut: nothing is left to cut then.
    """
    at = floor_ms(read_up_to.astimezone(UTC))
    if parts <= 1 or not window.start < at < window.end - MILLISECOND:
        return []
    return split_range(at, window.end, parts)


def carry_over(window: Window, following: Window, read_up_to: datetime) -> Window | None:
    """The rest of ``window`` and all of ``following`` (which starts where it ends, and no
    chain has begun) as one window, after a page whose last record was created at
    ``read_up_to``; None when that would be longer than 24 h or nothing is left to carry.

    Each window ends on a partial page, half a page lost on average: a chain that carries
    its rest into the next window reads the two with one partial page instead of two.  The
    joined window starts at the millisecond of ``read_up_to``, as a cut does (``resplit``).
    """
    at = floor_ms(read_up_to.astimezone(UTC))
    if following.start != window.end or not window.start < at < window.end:
        return None
    if following.end - at > MAX_WINDOW:
        return None
    return Window(at, following.end)
