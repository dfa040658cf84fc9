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
    tail's wait for its next read, which a request, a stop or a change of the snapshot
    demand (``nudge``) cuts short so the tail can decide again.

    A request while the tail waits ends the wait (``request`` returns True); whether it reads
    at once is the tail's decision (``tail_pace``: during a snapshot, not before the spacing).
    A request while it reads makes it read once more after the read in hand, since that read
    may have been answered before the round's change existed.  Any number of requests before
    one read cause that one read, not one each: a burst of notifications costs the rate
    budget one or two requests.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._running = False
        self._wanted = False
        self._version = 0

    def request(self) -> bool:
        """Ask for a read now; True when the tail was waiting (it decides at once)."""
        with self._changed:
            self._wanted = True
            self._poke()
            return not self._running

    def nudge(self) -> None:
        """A snapshot started or ended: the tail's wait is decided again (``demand``)."""
        with self._changed:
            self._poke()

    def stop(self) -> None:
        """A stop: end the wait in hand (``Stopper.adopt``)."""
        with self._changed:
            self._poke()

    def _poke(self) -> None:
        self._version += 1
        self._changed.notify_all()

    @property
    def wanted(self) -> bool:
        with self._changed:
            return self._wanted

    @property
    def version(self) -> int:
        with self._changed:
            return self._version

    def wait(self, seconds: float, stopper: Stopper, *, since: int) -> None:
        """Until ``seconds`` passed, ``stopper`` stops (it must have adopted this object), or
        anything happened since ``version`` was ``since``: a request, a nudge, a stop."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._version != since or stopper.stopped, max(seconds, 0.0)
            )

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
    """The tail's loop, in the calling thread: drain, then wait for the next read, as long as
    the pacing says (``tail_pace``: the interval while changes flow, stretched over empty
    pages while a snapshot wants the budget, a safety poll with notifications) or until a
    read-now request may be served, until ``stopper`` stops or the change cursor expires
    (``rebuild``).  ``stopper`` must have adopted ``wakeups``.

    The wait is decided again whenever something happens (a request, a snapshot starting or
    ending), from when the last read began: a tail stretched to its ceiling by a backfill
    reads again at its interval as soon as the backfill ends."""
    pacing = ctx.options.tail_pacing
    wait = pacing.interval
    last_read: float | None = None
    while True:
        version = wakeups.version
        snapshot = ctx.demand.running
        now = clock()
        if last_read is None:
            due = now
        else:
            due = last_read + min(wait, pacing.longest(snapshot=snapshot))
            if wakeups.wanted:
                due = min(due, last_read + pacing.wake_spacing(snapshot=snapshot))
        if stopper.stopped:
            return
        if now < due:
            wakeups.wait(due - now, stopper, since=version)
            continue
        last_read = clock()
        changes = drain_tail(
            ctx,
            tail,
            stopper,
            rebuild,
            snapshot_done,
            wakeups=wakeups,
            read_on_request=pacing.wake_spacing(snapshot=snapshot) == 0,
        )
        if rebuild.is_set() or stopper.stopped:
            return
        snapshot = ctx.demand.running
        wait = pacing.after(wait, changes=changes, snapshot=snapshot)
        ctx.observer.tail_interval(wait)


def drain_tail(
    ctx: SyncContext,
    tail: Tail,
    stopper: Stopper,
    rebuild: threading.Event,
    snapshot_done: threading.Event | None,
    *,
    wakeups: TailWakeups | None = None,
    read_on_request: bool = True,
) -> bool:
    """Read changes until there is no backlog (and, with ``read_on_request``, no read-now
    request came meanwhile: otherwise the request waits for the tail's loop, which spaces
    it); True when any page brought changes.

    ``snapshot_done`` is the running snapshot's end (None: no snapshot to wait for); with
    ``stop_when_caught_up`` the engine stops once both are through.
    """
    runner = ctx.runner(stopper, fatal_is_final=False)
    wakeups = wakeups or TailWakeups()
    changes = False
    wakeups.begin()
    try:
        while not stopper.stopped:
            wakeups.take()
            read = runner.run(lambda: tail_step(ctx, tail, stopper, rebuild), what="tail")
            changes = changes or read.changes > 0
            if rebuild.is_set() or (not read.has_more and (not read_on_request or wakeups.end())):
                break
    finally:
        wakeups.finish()
    snapshot_finished = snapshot_done is None or snapshot_done.is_set()
    if ctx.options.stop_when_caught_up and snapshot_finished and not rebuild.is_set():
        ctx.caught_up.set()
        ctx.log.info("caught_up")
        ctx.stopper.stop()
    return changes


@dataclass(frozen=True, slots=True)
class TailRead:
    """What one read of the change stream found."""

    changes: int
    has_more: bool


def tail_step(ctx: SyncContext, tail: Tail, stopper: Stopper, rebuild: threading.Event) -> TailRead:
    """Read and commit one page of changes: how many it brought, and whether the platform
    has more at once."""
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
        return TailRead(changes=0, has_more=False)
    if _idle(page, tail, ctx.options.idle_commit_interval):
        ctx.observer.tail_polled(has_more=page.has_more, projection_as_of=page.projection_as_of)
        return TailRead(changes=0, has_more=page.has_more)
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
    return TailRead(changes=len(page.changes) + len(page.rejected), has_more=page.has_more)
