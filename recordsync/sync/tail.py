"""The change tail: ``record-changes`` from the anchor, every ``next_cursor`` committed with
its page (spec, Records endpoints, "Rebuild without gaps", step 3).

The tail starts as soon as the anchor exists and runs alongside the snapshot with priority
on the shared rate budget, so a week-long backfill never leaves today's data a week stale;
that is safe because the warehouse keeps the highest revision whatever the arrival order.
It drains its backlog on each run of its interval job; an expired change cursor cannot be
read on, so it ends the generation and asks for a rebuild.  An idle poll (an empty page whose
``next_cursor`` is the committed one) has nothing to store and commits nothing, but for one
every ``idle_commit_interval`` that shows the tail alive: with fifty merchants in a process,
fifty empty transactions a second were most of an idle fleet's CPU.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from recordsync.core.errors import CursorExpiredError
from recordsync.core.models import ChangesPage
from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Priority
from recordsync.sync.context import SyncContext
from recordsync.sync.plan import highest_sequence


class TailWakeups:
    """Read-now requests for the tail (a round-end notification came), coalesced.

    A request while the tail is idle runs its job at once (``request`` returns True: the
    caller wakes the job); a request while it reads makes it read once more when the read in
    hand ends, since that read may have been answered before the round's change existed.
    Any number of requests during one read cause one more read, not one each: a burst of
    notifications costs the rate budget one or two requests.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = False
        self._wanted = False

    def request(self) -> bool:
        """Ask for a read now; True when the tail is idle and its job must be woken."""
        with self._lock:
            self._wanted = True
            return not self._running

    def begin(self) -> None:
        with self._lock:
            self._running = True

    def take(self) -> None:
        """A read starts: it covers every request made so far."""
        with self._lock:
            self._wanted = False

    def end(self) -> bool:
        """The tail caught up: True to stop reading, False when a request came meanwhile."""
        with self._lock:
            if self._wanted:
                return False
            self._running = False
            return True

    def finish(self) -> None:
        with self._lock:
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
    interval trigger polls again.

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
            ctx.options.merchant_id,
            records=records,
            rejected=page.rejected,
            next_cursor=page.next_cursor,
            last_sequence=last_sequence,
            projection_as_of=page.projection_as_of,
            position=tail.position,
            changes=page.changes,
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
