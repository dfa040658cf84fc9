"""The change tail: ``record-changes`` from the anchor, every ``next_cursor`` committed with
its page (spec, Records endpoints, "Rebuild without gaps", step 3).

The tail starts as soon as the anchor exists and runs alongside the snapshot with priority
on the shared rate budget, so a week-long backfill never leaves today's data a week stale;
that is safe because the warehouse keeps the highest revision whatever the arrival order.
It runs in the engine's own thread (``follow_tail``), never on the shared pools: no other
job of this merchant or another, slow or failing, can take its place or make it wait (issue
28), and a failure of its own is waited out there, slowly, on its own.  It drains its
backlog at every poll; an expired change cursor cannot be read on, so it ends the generation
and asks for a rebuild.  An idle poll (an empty page whose
``next_cursor`` is the committed one) has nothing to store and commits nothing, but for one
every ``idle_commit_interval`` that shows the tail alive: with fifty merchants in a process,
fifty empty transactions a second were most of an idle fleet's CPU.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from recordsync.core.errors import CursorExpiredError
from recordsync.core.models import ChangesPage
from recordsync.core.state import TailPage
from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Priority
from recordsync.sync.context import SyncContext
from recordsync.sync.plan import highest_sequence


class TailWakeups:
    """Read-now requests for the tail (a round-end notification came), coalesced, and the
    tail's wait for its next poll, which a request or a stop cuts short.

    A request while the tail waits ends the wait at once (``request`` returns True); a
    request while it reads makes it read once more when the read in hand ends, since that
    read may have been answered before the round's change existed.  Any number of requests
    during one read cause one more read, not one each: a burst of notifications costs the
    rate budget one or two requests.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._running = False
        self._wanted = False

    def request(self) -> bool:
        """Ask for a read now; True when the tail was waiting (it reads at once)."""
        with self._changed:
            self._wanted = True
            self._changed.notify_all()
            return not self._running

    def wait(self, seconds: float, stopper: Stopper) -> None:
        """Until ``seconds`` passed, a read is asked for, or ``stopper`` stops (it must have
        adopted this object, so that its stop ends the wait)."""
        with self._changed:
            self._changed.wait_for(lambda: self._wanted or stopper.stopped, max(seconds, 0.0))

    def stop(self) -> None:
        """A stop: end the wait in hand (``Stopper.adopt``)."""
        with self._changed:
            self._changed.notify_all()

    def begin(self) -> None:
        with self._changed:
            self._running = True

    def take(self) -> None:
        """A read starts: it covers every request made so far."""
        with self._changed:
            self._wanted = False

    def end(self) -> bool:
        """The tail caught up: True to stop reading, False when a request came meanwhile."""
        with self._changed:
            if self._wanted:
                return False
            self._running = False
            return True

    def finish(self) -> None:
        with self._changed:
            self._running = False


@dataclass
class Tail:
    """The tail's position in memory; the committed copy lives in ``sync_state``."""

    position: str
    committed_at: float | None = None  # time.monotonic() of this tail's last commit


def _idle(page: ChangesPage, tail: Tail, interval: float) -> bool:
    """An empty page that leaves the cursor where it is, soon after the last commit: there
    is nothing to store (the committed cursor already is ``next_cursor``), so no transaction.
    Once ``interval`` passed, such a page is committed all the same, stamping the state."""
    if page.changes or page.rejected or page.next_cursor != tail.position:
        return False
    return tail.committed_at is not None and time.monotonic() - tail.committed_at < interval


def next_poll(due: float, interval: float, now: float) -> float:
    """When the poll after the one due at ``due`` is: on the grid ``due + k * interval``,
    the first point after ``now``, so a poll that outlasts its interval is followed by the
    next one on time, never by a burst of the ones it missed."""
    if now < due + interval:
        return due + interval
    return due + (math.floor((now - due) / interval) + 1) * interval


def follow_tail(
    ctx: SyncContext,
    tail: Tail,
    stopper: Stopper,
    rebuild: threading.Event,
    snapshot_done: threading.Event | None,
    *,
    wakeups: TailWakeups,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """The tail's loop, in the calling thread: drain, then wait for the next poll (every
    ``poll_interval``) or a read-now request, until ``stopper`` stops or the change cursor
    expires (``rebuild``).  ``stopper`` must have adopted ``wakeups``."""
    interval = ctx.options.poll_interval
    due = clock()
    while True:
        wakeups.wait(due - clock(), stopper)
        if stopper.stopped:
            return
        drain_tail(ctx, tail, stopper, rebuild, snapshot_done, wakeups=wakeups)
        if rebuild.is_set():
            return
        due = next_poll(due, interval, clock())


def drain_tail(
    ctx: SyncContext,
    tail: Tail,
    stopper: Stopper,
    rebuild: threading.Event,
    snapshot_done: threading.Event | None,
    *,
    wakeups: TailWakeups | None = None,
) -> None:
    """Read changes until there is no backlog (and no read-now request came meanwhile); the
    tail's loop polls again at its next interval.

    ``snapshot_done`` is the running snapshot's end (None: no snapshot to wait for); with
    ``stop_when_caught_up`` the engine stops once both are through.
    """
    runner = ctx.runner(stopper, fatal_is_final=False)
    wakeups = wakeups or TailWakeups()
    wakeups.begin()
    try:
        while not stopper.stopped:
            wakeups.take()
            has_more = runner.run(lambda: tail_step(ctx, tail, stopper, rebuild), what="tail")
            if rebuild.is_set() or (not has_more and wakeups.end()):
                break
    finally:
        wakeups.finish()
    snapshot_finished = snapshot_done is None or snapshot_done.is_set()
    if ctx.options.stop_when_caught_up and snapshot_finished and not rebuild.is_set():
        ctx.caught_up.set()
        ctx.log.info("caught_up")
        ctx.stopper.stop()


def tail_step(ctx: SyncContext, tail: Tail, stopper: Stopper, rebuild: threading.Event) -> bool:
    """Read and commit one page of changes; True when the platform has more at once."""
    try:
        page = ctx.client.changes(
            cursor=tail.position, limit=ctx.options.page_size, priority=Priority.TAIL
        )
    except CursorExpiredError as exc:
        ctx.log.error(  # noqa: TRY400 - an expected expiry with its own action: no traceback
            "change_cursor_expired",
            error=str(exc),
            request_id=exc.request_id,
            action="rebuild: new anchor and a new snapshot; existing rows are kept",
        )
        rebuild.set()
        stopper.stop()
        return False
    if _idle(page, tail, ctx.options.idle_commit_interval):
        ctx.observer.tail_polled(has_more=page.has_more, projection_as_of=page.projection_as_of)
        return page.has_more
    records = [change.record for change in page.changes]
    last_sequence = highest_sequence(page.changes)
    started = time.perf_counter()
    with ctx.writer:
        ctx.warehouse.commit_tail_page(
            TailPage(
                records=records,
                rejected=page.rejected,
                next_cursor=page.next_cursor,
                last_sequence=last_sequence,
                projection_as_of=page.projection_as_of,
                position=tail.position,
                changes=page.changes,
            )
        )
    ctx.observer.page_written("tail", time.perf_counter() - started)
    tail.position = page.next_cursor
    tail.committed_at = time.monotonic()
    ctx.after_commit("tail", records, page.rejected, page.request_id)
    ctx.observer.tail_page(
        len(page.changes),
        has_more=page.has_more,
        projection_as_of=page.projection_as_of,
        last_sequence=last_sequence,
    )
    if page.changes or page.rejected:
        ctx.log.debug(
            "tail_page_committed",
            changes=len(page.changes),
            has_more=page.has_more,
            last_sequence=last_sequence,
            request_id=page.request_id,
        )
    return page.has_more
