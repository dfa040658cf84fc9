"""One window's cursor chain (``WindowChain``): ``records`` pages read one after the other from
where the window's committed cursor says, each committed with the cursor that covers it, and
the rest of the window cut for more chains (``split_if_wanted``) or carried into the next
unread window (``carry_if_spare``) when the measured round trip wants it.  A chain's place
lives in its object, so a step deferred by a failure (``core.waiting``) is tried again on the
same page.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from recordsync.core.errors import CursorExpiredError
from recordsync.core.models import RecordsPage
from recordsync.core.state import (
    REBUILD_JOB,
    Phase,
    Window,
    WindowPage,
    WindowProgress,
)
from recordsync.core.times import MILLISECOND
from recordsync.platform.budget import Priority
from recordsync.sync.context import SyncContext
from recordsync.sync.resilience import StepRunner
from recordsync.sync.snapshot.pending_windows import PendingWindows
from recordsync.sync.windows import (
    resplit,
)


@dataclass(slots=True)
class Sample:
    """The records a chain read in its window since the first one it saw there: their
    density is what its pages left are estimated from.  Counted from the first record, not
    from the window's start, so a stretch without records before it (a history that starts
    after the range asked for) does not make the rest look sparse and the cut too coarse."""

    first_at: datetime | None = None
    records: int = 0

    def add(self, page: RecordsPage) -> None:
        if page.records and self.first_at is None:
            self.first_at = min(record.created_at for record in page.records)
        self.records += len(page.records)


def read_window(
    ctx: SyncContext,
    job: str,
    progress: WindowProgress,
    runner: StepRunner,
    snapshot: PendingWindows | None = None,
) -> None:
    """Read one window to its end from where its committed cursor says (``WindowChain``)."""
    WindowChain(ctx, job, progress, snapshot).read(runner)


class WindowChain:
    """One window's cursor chain, read page by page from where its committed cursor says;
    with ``snapshot``, the rest of the window is cut for more chains when the measured round
    trip needs them.  Where it is lives here, so a step deferred by a failure
    (``core.waiting``) is tried again on the same page."""

    def __init__(
        self,
        ctx: SyncContext,
        job: str,
        progress: WindowProgress,
        snapshot: PendingWindows | None = None,
    ) -> None:
        self._ctx = ctx
        self._job = job
        self._snapshot = snapshot
        self.window = progress.window
        self.cursor = progress.cursor
        self.issued_at = progress.cursor_issued_at
        self.sample = Sample()
        self.done = False

    def read(self, runner: StepRunner) -> None:
        """Read on until the window's last page is committed."""
        while not self.done:
            runner.run(self._step, what=f"{self._job} window {self.window.start.isoformat()}")
        self._ctx.log.debug(
            "window_done", job=self._job, window_start=self.window.start.isoformat()
        )

    def _step(self) -> None:
        ctx, job, snapshot, window, cursor = (
            self._ctx,
            self._job,
            self._snapshot,
            self.window,
            self.cursor,
        )
        # The chain with most left goes first when several wait for the budget (budget.py).
        rank = 0.0 if snapshot is None else snapshot.pages_left(window)
        try:
            page = ctx.records_page(window.start, window.end, cursor, Priority.SNAPSHOT, rank)
            answered = time.perf_counter()
        except CursorExpiredError as exc:
            if cursor is None:
                raise
            # Spec: a records cursor is valid 24 h from its first issue.  The chain is
            # one snapshot, so a half-read chain cannot be continued: read the window
            # again from its start (rows already written stay; newer ones win).
            ctx.log.warning(
                "window_cursor_expired",
                job=job,
                window_start=window.start.isoformat(),
                request_id=exc.request_id,
                action="restarting the window from its start",
            )
            with ctx.writer:
                ctx.warehouse.restart_window(job, window)
            self.cursor, self.issued_at, self.sample = None, None, Sample()
            return
        position = cursor or f"first:{window.start.isoformat()}/{window.end.isoformat()}"
        if cursor is None:
            self.issued_at = page.projection_as_of
        finished = not page.has_more
        seconds = ctx.commit_window_page(
            WindowPage(
                job,
                window,
                records=page.records,
                rejected=page.rejected,
                next_cursor=None if finished else page.next_cursor,
                cursor_issued_at=self.issued_at,
                done=finished,
                position=position,
            )
        )
        ctx.observer.page_written(job, seconds)
        ctx.after_commit(job, page.records, page.rejected, page.request_id)
        ctx.observer.window_page(job, window, len(page.records), done=finished)
        if finished and job == REBUILD_JOB:
            state = ctx.warehouse.load_state()
            if state is not None and state.phase is Phase.TAILING:
                ctx.phase(Phase.TAILING.value)
        self.cursor, self.done = page.next_cursor, finished
        self.sample.add(page)
        if snapshot is not None:
            snapshot.committed(window, time.perf_counter() - answered, finished=finished)
            cut = (
                None
                if finished
                else split_if_wanted(ctx, job, window, page, sample=self.sample, snapshot=snapshot)
                or carry_if_spare(ctx, job, window, page, snapshot=snapshot)
            )
            if cut is not None:
                self.window, self.cursor, self.issued_at, self.sample = cut, None, None, Sample()


def split_if_wanted(
    ctx: SyncContext,
    job: str,
    window: Window,
    page: RecordsPage,
    *,
    sample: Sample,
    snapshot: PendingWindows,
) -> Window | None:
    """Cut the rest of ``window`` into more windows when the measured round trip wants more
    chains than are in flight; the window this chain reads on, or None when left whole.

    The cut is committed before any piece is read: a process killed before it resumes the
    window's chain from its cursor, one killed after it reads the pieces.
    """
    if not page.records or sample.first_at is None:
        return None
    read_up_to = max(record.created_at for record in page.records)
    covered = (read_up_to - sample.first_at) / MILLISECOND
    if covered <= 0:
        return None
    left = (window.end - read_up_to) / MILLISECOND
    pages_read = sample.records / ctx.options.page_size
    pages_left = pages_read / covered * left
    snapshot.report(window, read=pages_read, covered_ms=covered, left=pages_left)
    wanted = snapshot.chains_wanted(ctx.client.pace())
    if wanted is None:
        return None
    snapshot.grow(wanted)
    parts = snapshot.reserve(wanted, pages_left, snapshot.pages_elsewhere(window))
    pieces = resplit(window, read_up_to, parts)
    if len(pieces) != parts or parts <= 1:
        snapshot.release(parts)
        return None
    try:
        with ctx.writer:
            ctx.warehouse.split_window(job, window, pieces)
    except BaseException:
        snapshot.release(parts)
        raise
    merchant_id = ctx.options.merchant_id
    snapshot.offer(
        window,
        pieces,
        [
            WindowProgress(merchant_id, job, piece, None, None, done=False, records=0)
            for piece in pieces[1:]
        ],
    )
    ctx.log.info(
        "window_split",
        job=job,
        window_start=window.start.isoformat(),
        at=pieces[0].start.isoformat(),
        pieces=len(pieces),
        chains_wanted=wanted,
    )
    return pieces[0]


def carry_if_spare(
    ctx: SyncContext, job: str, window: Window, page: RecordsPage, *, snapshot: PendingWindows
) -> Window | None:
    """Carry the rest of ``window`` into the unread window after it when both fit in 24 h
    and enough windows are left for the chains the round trip wants; the window this chain
    reads on, or None when it reads on as it is.

    Every window ends on a partial page, half a page lost on average; a week cut into eight
    equal windows lost 2.4 % of the budget to them (``bench/budget_utilisation.py``).  Carried
    over, the two windows end on one.  Committed before the joined window is read, like a cut: a
    process killed before it resumes the window's chain from its cursor, one killed after it
    reads the joined window (records of its first millisecond may be read twice; the highest
    revision wins).
    """
    if not page.records:
        return None
    wanted = snapshot.chains_wanted(ctx.client.pace())
    if wanted is None:
        return None
    read_up_to = max(record.created_at for record in page.records)
    claimed = snapshot.claim_following(window, read_up_to, wanted)
    if claimed is None:
        return None
    following, joined = claimed
    try:
        with ctx.writer:
            ctx.warehouse.carry_window(job, window, following.window, joined)
    except BaseException:
        snapshot.unclaim(following)
        raise
    snapshot.carry_into(window, joined)
    ctx.log.info(
        "window_carried",
        job=job,
        window_start=window.start.isoformat(),
        at=joined.start.isoformat(),
        into=following.window.start.isoformat(),
        chains_wanted=wanted,
    )
    return joined
