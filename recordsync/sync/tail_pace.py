"""How often the tail reads the change stream: the adaptive poll interval.

The tail and the snapshot share one rate budget per merchant (spec: Limits, "Record rate"),
2 requests a second by default.  A tail that reads every second takes half of it, and during
a backfill that half mostly fetches empty pages.  So the interval follows the stream:

- **Changes flow** (the last read brought some): read again after ``interval`` (the
  configured ``RECORDSYNC_POLL_INTERVAL``, 1 s): freshness as before, within the interval and
  a round trip.
- **Empty pages** stretch the wait, doubling it each time, while something else wants the
  budget: up to ``ceiling`` while a snapshot or backfill of the merchant runs.  With nothing
  else wanting it, an idle tail without notifications keeps reading every ``interval``: the
  budget has no better use, and the first change after a quiet spell is seen as soon.
- **Round-end notifications** (``safety`` is set: the daemon receives them) wake the tail at
  once, so an idle tail only needs a safety poll, for what no notification announces (a later
  revision of an ended round, a notification lost for good): empty pages stretch up to
  ``safety`` even with no snapshot running.
- **During a snapshot, with notifications**, every read of the tail, a poll or a wake-up, is
  at least ``snapshot_spacing`` after the one before: any number of notifications in that
  time make one read (coalesced), and flowing changes are read at that spacing too.  The
  snapshot then keeps at least ``1 - 1 / (snapshot_spacing x requests per second)`` of the
  budget: 0.95 with the defaults (10 s, 2 a second).

A backlog (a page that says ``has_more``) is always read on at once: that is catching up, not
polling.  Pure functions of the last wait and what the last read found; the tail's loop
(``tail.follow_tail``) supplies the clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from recordsync.core.settings import (
    DEFAULT_POLL_CEILING,
    DEFAULT_SNAPSHOT_TAIL_INTERVAL,
)

# An empty page multiplies the wait by this much, up to the ceiling in force.
STRETCH: Final = 2.0


@dataclass(frozen=True, slots=True)
class TailPacing:
    """The tail's intervals, in seconds; every one is at least ``interval``."""

    interval: float = 1.0
    ceiling: float = DEFAULT_POLL_CEILING
    # None: no round-end notifications are received; the tail relies on its polls alone.
    safety: float | None = None
    snapshot_spacing: float = DEFAULT_SNAPSHOT_TAIL_INTERVAL

    def __post_init__(self) -> None:
        for name in ("interval", "ceiling", "snapshot_spacing"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
        if self.safety is not None and not (self.safety > 0 and math.isfinite(self.safety)):
            raise ValueError(f"safety must be a finite number of seconds > 0, got {self.safety!r}")

    @property
    def notified(self) -> bool:
        return self.safety is not None

    def flowing(self, *, snapshot: bool) -> float:
        """The wait after a read that brought changes."""
        if snapshot and self.notified:
            return max(self.interval, self.snapshot_spacing)
        return self.interval

    def longest(self, *, snapshot: bool) -> float:
        """The longest wait of an idle tail."""
        if snapshot:
            return max(self.ceiling, self.flowing(snapshot=True))
        if self.safety is not None:
            return max(self.interval, self.safety)
        return self.interval

    def after(self, previous: float, *, changes: bool, snapshot: bool) -> float:
        """The wait before the next read, after one that waited ``previous`` and found
        ``changes`` (or none), with a snapshot of the merchant running or not."""
        shortest = self.flowing(snapshot=snapshot)
        if changes:
            return shortest
        return min(self.longest(snapshot=snapshot), max(previous * STRETCH, shortest))

    def wake_spacing(self, *, snapshot: bool) -> float:
        """How long after the last read began a wake-up may make the tail read again."""
        return self.snapshot_spacing if snapshot and self.notified else 0.0
