"""The shared record rate budget (spec: Limits, "Record rate"; Capabilities, ``limits``).

The platform allows ``record_requests`` requests per ``record_seconds`` per merchant, shared by
``GET /v1/records`` and ``GET /v1/record-changes``.  One ``RateBudget`` per merchant is shared by
every thread of the process, so the snapshot, the tail and background checks never add up to
more than the platform allows.

The platform counts *arrivals* in a sliding window, and we cannot see them; we know when a
request started (just before it went out) and, once it is answered, that it had arrived by
then.  So each request is given a latest possible arrival: its start plus ``margin``, or the
moment its answer came back if that is earlier (the platform decides on a request before it
answers it).  A new request may start only when fewer than ``requests`` earlier ones could
still have arrived within the last ``seconds``.  Since a request never arrives before it starts,
no ``seconds`` of the platform's clock can then hold more than ``requests`` arrivals.

- The margin is the assumption: a request unanswered after ``margin`` seconds (a slow or lost
  answer) is taken to have arrived within ``margin`` of its start, that is, no request is
  delayed on its way ``margin`` more than a later one (arrival jitter).  50 ms by default
  (``RECORDSYNC_RATE_MARGIN``), measured by ``bench/budget_utilisation.py``.
- A fast answer removes the assumption: with quick round trips, the spacing is the round
  trip, not the margin, so the budget is used nearly in full without trusting any bound.

A start is the moment the request's bytes are on the socket, not the moment the budget let the
caller go: ``acquire`` hands out a ``Slot`` and the transport calls ``Slot.stamp()`` right after
the write (wire.py; a transport that cannot tell has it stamped when its answer comes back).
Until it is stamped, a slot counts as starting *now* (its window cannot end yet), so a delay
between ``acquire`` and the write (the connection pool, the GIL, another thread, the
collector) can only make us slower, never let two requests land closer than allowed, and the
margin is left to the network and the platform's front door.

Waiters are served by ``Priority`` (lower first), then by ``rank`` (higher first), then first
come first served: the tail must not starve behind a week-long snapshot, and background work
goes last.  The snapshot ranks a chain's request by the pages its chain has left, so that when
several chains wait, the one with most to read goes first: a job ends when its longest chain
ends, and served in arrival order, the chains' ends scatter and the budget idles while the
last few read their rest one round trip at a time (``bench/budget_utilisation.py``).  A 429's
Retry-After pauses the whole budget (``pause``), every caller, not only the one that got it.

A caller that must not wait out a failure in its thread (a job on a shared pool,
``core.waiting``) is not kept through a pause: it gets ``Deferred`` with the pause's rest and
comes back then.  The budget's pacing, a wait of at most its window, is the work itself, and
such a caller waits it out like any other.

Background work on a shared thread (the drift check, on the periodic pool) does not queue
either: behind the snapshot's chains it would wait for the whole snapshot, and eight
merchants backfilling once held every periodic thread that way, each merchant's catalogue
refresh and cross-check stopped behind them.  So such a caller is served only
when nobody is ahead of it; otherwise, or when two windows did not serve it, it gets
``Deferred`` and its thread goes back to the pool.  Last is not never: once background work
has been deferred for a window, its next request goes ahead of the snapshot (never of the
tail), so it gets about one request per window of a busy budget and a drift check ends
within its interval.  A background caller that may wait (a verify, in a thread of its own)
queues last as before.

Time is injected (``clock`` and ``sleep``) so the rule is tested on a fake clock; ``sleep`` may
raise ``ShutdownRequestedError`` to stop a waiting caller, which leaves the budget consistent.
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from recordsync.core.waiting import Deferred, may_wait

# How long an acquired slot may stay neither stamped nor cancelled before it is presumed sent
# (at acquire time plus this).  The client always stamps or cancels; this only turns a
# forgotten slot into a slower budget instead of a budget that blocks forever.
UNSTAMPED_GRACE_SECONDS = 10.0

# Waiters that are not first in line wait on a condition; this bounds that wait so a missed
# notification can only cost a short delay, never a hang.
_IDLE_RECHECK_SECONDS = 0.05


class Priority(IntEnum):
    """Who goes first when several callers wait: lower values are served first."""

    TAIL = 0
    SNAPSHOT = 1
    BACKGROUND = 2


@dataclass(frozen=True, slots=True)
class Pace:
    """What decides how many requests must be in flight to use the budget in full: its terms
    and the measured round trip of a request (None before the first answer)."""

    requests: int
    seconds: float
    margin: float
    round_trip: float | None


class Slot:
    """Permission to start one request; ``stamp()`` it right before sending.

    If the request is not sent after all, ``cancel()`` gives the place back.  ``cancel()`` after
    ``stamp()`` does nothing: a request that started counts whatever happened to it.
    """

    __slots__ = ("_budget", "_cancelled", "acquired_at", "answered_at", "started_at")

    def __init__(self, budget: RateBudget, acquired_at: float) -> None:
        self._budget = budget
        self._cancelled = False
        self.acquired_at = acquired_at
        self.started_at: float | None = None
        self.answered_at: float | None = None

    @property
    def stamped(self) -> bool:
        return self.started_at is not None

    def stamp(self) -> None:
        self._budget._stamp(self)  # noqa: SLF001 - the slot is part of the budget

    def cancel(self) -> None:
        self._budget._cancel(self)  # noqa: SLF001 - the slot is part of the budget

    def answered(self) -> None:
        """The platform's answer came back: the request had arrived by now."""
        self._budget._answer(self)  # noqa: SLF001 - the slot is part of the budget

    def __repr__(self) -> str:
        return (
            f"Slot(acquired_at={self.acquired_at!r}, started_at={self.started_at!r}, "
            f"answered_at={self.answered_at!r})"
        )


class RateBudget:
    """At most ``requests`` starts per ``seconds`` (+ ``margin``), shared by every thread."""

    def __init__(
        self,
        requests: int,
        seconds: float,
        *,
        margin: float = 0.03,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        cold_start: bool = False,
        cold_since: float | None = None,
    ) -> None:
        """``cold_start``: assume the window before creation was fully spent.

        A process that starts (or restarts after a crash) cannot know what the previous
        process sent in the last window, and the platform counts both against the same
        merchant.  So a daemon's budget starts paused for one window (``seconds`` plus the
        margin, within which a request sent just before may still arrive); if ``resize``
        later brings a longer window before any request went out, the pause grows to match.
        ``cold_since`` (on ``clock``, never later than now) is when that window starts: the
        process's own start, when the budget is made after its imports, for nothing this
        process sends can precede its start, and a previous process's requests all did.
        """
        _check_limits(requests, seconds)
        if not margin >= 0 or math.isinf(margin):
            raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
        self._requests = requests
        self._seconds = float(seconds)
        self._margin = float(margin)
        # Starts are remembered for the longest window ever configured, so a resize to a
        # longer window still sees the starts that fall inside it.
        self._horizon = self._window
        self._clock = clock
        self._sleep = sleep
        self._cond = threading.Condition(threading.Lock())
        self._recent: list[Slot] = []
        # (priority, -rank, arrival), sorted: the head goes next.
        self._queue: list[tuple[int, float, int]] = []
        self._arrivals = itertools.count()
        self._paused_until = -math.inf
        self._waited = 0.0
        # When background work on a shared thread was first deferred since one of it was
        # last served (see the module docstring); None: it is not waiting.
        self._background_deferred_since: float | None = None
        self._deferred = 0
        now = clock()
        since = now if cold_since is None else min(cold_since, now)
        self._cold_since: float | None = since if cold_start else None
        if self._cold_since is not None:
            self._paused_until = self._cold_since + self._window

    @property
    def requests(self) -> int:
        return self._requests

    @property
    def seconds(self) -> float:
        return self._seconds

    @property
    def margin(self) -> float:
        return self._margin

    @property
    def waited_seconds_total(self) -> float:
        """Total time callers spent blocked in ``acquire`` (for metrics)."""
        with self._cond:
            return self._waited

    @property
    def waiting(self) -> int:
        """How many callers are blocked in ``acquire`` right now."""
        with self._cond:
            return len(self._queue)

    @property
    def deferred_total(self) -> int:
        """How many acquires were ``Deferred`` rather than kept waiting (for metrics)."""
        with self._cond:
            return self._deferred

    @property
    def _window(self) -> float:
        return self._seconds + self._margin

    def acquire(self, priority: Priority = Priority.SNAPSHOT, *, rank: float = 0.0) -> Slot:
        """Block until this caller may start one request; every attempt needs its own slot.
        Within a priority a higher ``rank`` goes first (a chain's pages left)."""
        if rank != rank:  # noqa: PLR0124 - NaN would break the queue's order
            raise ValueError("rank must be a number, not NaN")
        with self._cond:
            entered = self._clock()
            # Background work on a shared thread does not queue (see the module docstring).
            hurried = priority is Priority.BACKGROUND and not may_wait()
            due = hurried and self._background_due(entered)
            if due:  # deferred for a window already: ahead of the snapshot, behind the tail
                ticket = (int(Priority.SNAPSHOT), -math.inf, next(self._arrivals))
            else:
                ticket = (int(priority), -rank, next(self._arrivals))
            bisect.insort(self._queue, ticket)
            try:
                while True:
                    now = self._clock()
                    self._defer_through_pause(now)
                    if hurried:
                        self._defer_background(
                            behind=self._queue[0] != ticket and not due,
                            waited=now - entered,
                            now=now,
                        )
                    if self._queue[0] != ticket:
                        # Not first in line: wait until the head changes.
                        self._cond.wait(timeout=_IDLE_RECHECK_SECONDS)
                        continue
                    delay = self._delay(now)
                    if delay <= 0:
                        self._queue.pop(0)
                        self._cold_since = None
                        if hurried:
                            self._background_deferred_since = None
                        slot = Slot(self, now)
                        self._recent.append(slot)
                        self._waited += max(0.0, now - entered)
                        self._cond.notify_all()
                        return slot
                    # Sleep without the lock: other callers may join the queue (and overtake
                    # us by priority), stamp, cancel or pause meanwhile.  We re-check after.
                    self._cond.release()
                    try:
                        self._sleep(self._pause_for(delay))
                    finally:
                        self._cond.acquire()
            except BaseException as exc:
                # ShutdownRequestedError from sleep, Deferred, or anything else: leave no
                # trace in the queue so the callers behind us move up.
                if isinstance(exc, Deferred):
                    self._deferred += 1
                self._queue.remove(ticket)
                self._waited += max(0.0, self._clock() - entered)
                self._cond.notify_all()
                raise

    def _defer_through_pause(self, now: float) -> None:
        """A caller that must not wait out a failure is not kept through a pause: it gets
        ``Deferred`` with the pause's rest (``core.waiting``)."""
        if now < self._paused_until and not may_wait():
            raise Deferred(self._paused_until - now, "the rate budget is paused")

    def _background_due(self, now: float) -> bool:
        """Whether background work on a shared thread has been deferred for a window."""
        since = self._background_deferred_since
        return since is not None and now - since >= self._window

    def _defer_background(self, *, behind: bool, waited: float, now: float) -> None:
        """Background work on a shared thread that someone is ahead of gets ``Deferred``
        until it is due; so does one that two windows did not serve (first in line, its
        pacing is at most one: it was overtaken), a moment later when due already."""
        if not behind and waited < 2 * self._window:
            return
        if self._background_deferred_since is None:
            self._background_deferred_since = now - waited
        due_in = self._background_deferred_since + self._window - now
        raise Deferred(max(due_in, _IDLE_RECHECK_SECONDS), "the rate budget is taken by the sync")

    def pause(self, seconds: float) -> None:
        """Stop every caller from starting a request for ``seconds`` (a 429's Retry-After)."""
        if not seconds > 0:
            return
        with self._cond:
            self._paused_until = max(self._paused_until, self._clock() + seconds)
            self._cond.notify_all()

    def resize(self, requests: int, seconds: float) -> None:
        """Adopt the platform's limits (``capabilities.limits``); past starts still count."""
        _check_limits(requests, seconds)
        with self._cond:
            self._requests = requests
            self._seconds = float(seconds)
            self._horizon = max(self._horizon, self._window)
            if self._cold_since is not None:
                self._paused_until = max(self._paused_until, self._cold_since + self._window)
            self._cond.notify_all()

    def _delay(self, now: float) -> float:
        """Seconds until the head of the queue may start; 0 or less when it may start now."""
        if now < self._paused_until:
            return self._paused_until - now
        self._recent = [
            s for s in self._recent if self._latest_arrival(s, now) > now - self._horizon
        ]
        seconds = self._seconds
        arrivals = sorted(
            arrival
            for arrival in (self._latest_arrival(s, now) for s in self._recent)
            if arrival > now - seconds
        )
        excess = len(arrivals) - self._requests + 1
        if excess <= 0:
            return 0.0
        # The oldest ``excess`` possible arrivals must leave the window first.  An unstamped
        # slot counts as starting now, so waiting for it means at least a full window.
        return arrivals[excess - 1] + seconds - now

    def _latest_arrival(self, slot: Slot, now: float) -> float:
        """The latest moment ``slot``'s request can have reached the platform (see above)."""
        if slot.started_at is None:
            return min(now, slot.acquired_at + UNSTAMPED_GRACE_SECONDS) + self._margin
        latest = slot.started_at + self._margin
        if slot.answered_at is not None and slot.answered_at < latest:
            return slot.answered_at
        return latest

    def _pause_for(self, delay: float) -> float:
        """How long to sleep before looking again: an answer coming back meanwhile may let the
        head start up to ``margin`` earlier, so the last ``margin`` is not slept blindly."""
        if delay > 2 * self._margin:
            return delay - self._margin
        return delay

    def _stamp(self, slot: Slot) -> None:
        with self._cond:
            if slot.started_at is not None or slot._cancelled:  # noqa: SLF001
                raise RuntimeError("a slot is stamped once, and never after cancel()")
            slot.started_at = self._clock()

    def _answer(self, slot: Slot) -> None:
        with self._cond:
            if slot.started_at is None or slot.answered_at is not None:
                return  # only a request that went out can be answered, once
            slot.answered_at = self._clock()
            self._cond.notify_all()

    def _cancel(self, slot: Slot) -> None:
        with self._cond:
            if slot.started_at is not None or slot._cancelled:  # noqa: SLF001
                return
            slot._cancelled = True  # noqa: SLF001
            self._recent = [s for s in self._recent if s is not slot]
            self._cond.notify_all()

    def __repr__(self) -> str:
        return (
            f"RateBudget(requests={self._requests}, seconds={self._seconds}, margin={self._margin})"
        )


# The query endpoints' limit before capabilities are read (spec: Limits, "Runtime values of
# query_requests, query_seconds ... not shown"): one request a second, the cautious guess.
DEFAULT_QUERY_REQUESTS = 1
DEFAULT_QUERY_SECONDS = 1


def default_query_budget(
    *, margin: float = 0.03, sleep: Callable[[float], None] = time.sleep
) -> RateBudget:
    """The budget of the query endpoints (the game catalogue) until capabilities resize it.

    It is a ``RateBudget`` of its own, never the record budget: the catalogue's requests
    count against ``limits.query_requests`` per ``query_seconds`` and the record endpoints'
    against ``record_requests`` per ``record_seconds`` (spec: Capabilities), so neither may
    slow or spend the other.  It starts cold like the record budget: a process before us
    may have spent the last window.
    """
    return RateBudget(
        DEFAULT_QUERY_REQUESTS, DEFAULT_QUERY_SECONDS, margin=margin, sleep=sleep, cold_start=True
    )


def _check_limits(requests: int, seconds: float) -> None:
    if isinstance(requests, bool) or not isinstance(requests, int) or requests < 1:
        raise ValueError(f"requests must be a positive integer, got {requests!r}")
    if not seconds > 0 or math.isinf(seconds):
        raise ValueError(f"seconds must be a finite number > 0, got {seconds!r}")
