"""What a range job would cost, before it runs: ``--dry-run`` of backfill, resync, reset and
``verify --repair``.  Pure: the windows, the records the warehouse already holds in
each, and the merchant's limit come in; lines for a person come out.

The platform's count is not known without reading it, so a window's pages are estimated from
the rows the warehouse holds there (at least one request per window, a page of
``page_size``): a range never synced shows its windows at one request each, which is what the
first page of each costs.  The duration is the requests at the merchant's record limit
(spec: Limits, "Record rate"), which the tail shares: the job's real time is longer by the
tail's own requests and the platform's answers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from recordsync.core.models import Limits
from recordsync.core.state import Window


@dataclass(frozen=True, slots=True)
class WindowEstimate:
    window: Window
    stored: int  # rows the warehouse holds with created_at in the window
    requests: int


@dataclass(frozen=True, slots=True)
class DryRun:
    what: str  # "backfill of m-1 [from, to)", "reset of m-1", ...
    windows: Sequence[WindowEstimate]
    extra_requests: int  # beyond the windows' pages (a reset's anchor)
    limits: Limits

    @property
    def requests(self) -> int:
        return self.extra_requests + sum(item.requests for item in self.windows)

    @property
    def seconds(self) -> float:
        """The requests at the merchant's limit: ``record_requests`` per ``record_seconds``."""
        return self.requests * self.limits.record_seconds / self.limits.record_requests


def estimate(
    what: str,
    windows: Sequence[Window],
    stored: Sequence[int],
    *,
    page_size: int,
    limits: Limits,
    extra_requests: int = 0,
) -> DryRun:
    """The job's windows with the rows stored in each (``stored``, the same order)."""
    items = [
        WindowEstimate(window, count, max(1, math.ceil(count / page_size)))
        for window, count in zip(windows, stored, strict=True)
    ]
    return DryRun(what, items, extra_requests, limits)


def lines(plan: DryRun) -> list[str]:
    """The plan for a person: a line per window, then the totals; the last line says that
    nothing was read or written."""
    rows = [
        f"  {item.window.start.isoformat()} .. {item.window.end.isoformat()}  "
        f"{item.stored:>9} rows stored  ~{item.requests} requests"
        for item in plan.windows
    ]
    extra = f" + {plan.extra_requests} to anchor" if plan.extra_requests else ""
    limit = f"{plan.limits.record_requests} per {plan.limits.record_seconds} s"
    total = (
        f"{len(plan.windows)} windows, ~{plan.requests} requests{extra} at the merchant's limit "
        f"of {limit}: ~{_duration(plan.seconds)} beside the tail's own requests"
    )
    return [
        f"dry run: {plan.what}",
        *rows,
        total,
        "dry run: nothing was read from the records or changes, and nothing was written",
    ]


def _duration(seconds: float) -> str:
    if seconds < 120:  # noqa: PLR2004 - a readable unit, not a limit
        return f"{seconds:.0f} s"
    if seconds < 7200:  # noqa: PLR2004
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
