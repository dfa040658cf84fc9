"""Snapshot windows: ``records`` over a range in windows of at most 24 h, every page committed
with its window's cursor (spec, Records endpoints, "Rebuild without gaps", step 2).  The
daemon reads the rebuild's windows ``[history_from, snapshot_end(anchor))``; the one-shot
range backfill reads its own, beside the tail, never touching the tail's state.

Windows are fetched by a few workers to hide request latency; every request goes through
the one budget and commits are serialised by one writer lock unless the warehouse takes
concurrent commits (see ``context``).  Pages are streamed and dropped after their commit:
memory does not grow with the history.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from recordsync.core.errors import ConfigurationError, CursorExpiredError
from recordsync.core.state import REBUILD_JOB, Phase, WindowProgress, backfill_job
from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Priority
from recordsync.sync.context import SyncContext
from recordsync.sync.jobs import JobHost, Jobs
from recordsync.sync.plan import hand_out_order, plan_windows
from recordsync.sync.resilience import StepRunner


@dataclass(frozen=True, slots=True)
class BackfillResult:
    job: str
    windows: int
    records: int


class PendingWindows:
    """The windows of one job still to read, shared by its worker jobs in hand-out order."""

    def __init__(self, pending: Sequence[WindowProgress], workers: int) -> None:
        self.queue: queue.SimpleQueue[WindowProgress] = queue.SimpleQueue()
        for item in hand_out_order(pending):
            self.queue.put(item)
        self.workers = workers
        self.finished_workers = 0
        self.done = threading.Event()
        self.lock = threading.Lock()

    def worker_finished(self, *, completed: bool) -> None:
        with self.lock:
            self.finished_workers += 1
            if completed and self.finished_workers == self.workers and self.queue.empty():
                self.done.set()


def backfill(
    ctx: SyncContext, start: datetime, end: datetime, *, host: JobHost | None = None
) -> BackfillResult:
    """Snapshot ``[start, end)`` alone, resumably, without touching the tail's state."""
    if not start < end:
        raise ConfigurationError("backfill: --from must be earlier than --to")
    job = backfill_job(start, end)
    ctx.phase("backfill")
    with ctx.writer:
        ctx.warehouse.ensure_job(ctx.options.merchant_id, job, plan_windows(start, end))
    generation = Stopper(parent=ctx.stopper)
    snapshot = plan_snapshot(ctx, job, generation)
    if snapshot is not None:
        jobs = Jobs(generation, workers=ctx.options.snapshot_concurrency, host=host)
        schedule_snapshot(ctx, jobs, job, snapshot, generation, fatal_is_final=True)
        jobs.run_until_stopped(done=snapshot.done)
    progress = ctx.warehouse.load_windows(ctx.options.merchant_id, job)
    return BackfillResult(
        job=job, windows=len(progress), records=sum(item.records for item in progress)
    )


def plan_snapshot(ctx: SyncContext, job: str, stopper: Stopper) -> PendingWindows | None:
    """The job's windows still to read, or None when every one is done."""
    runner = ctx.runner(stopper, fatal_is_final=False)
    progress = runner.run(
        lambda: ctx.warehouse.load_windows(ctx.options.merchant_id, job),
        what="load windows",
    )
    pending = [item for item in progress if not item.done]
    ctx.observer.windows_planned(job, len(progress), len(progress) - len(pending))
    if not pending:
        return None
    ctx.log.info("snapshot_started", job=job, windows=len(progress), pending=len(pending))
    return PendingWindows(pending, workers=min(ctx.options.snapshot_concurrency, len(pending)))


def schedule_snapshot(
    ctx: SyncContext,
    jobs: Jobs,
    job: str,
    snapshot: PendingWindows,
    stopper: Stopper,
    *,
    fatal_is_final: bool,
) -> None:
    """One worker job per reader; each takes windows until none is left."""
    runner = ctx.runner(stopper, fatal_is_final=fatal_is_final)

    def worker() -> None:
        completed = False
        try:
            while not stopper.stopped:
                try:
                    item = snapshot.queue.get_nowait()
                except queue.Empty:
                    completed = True
                    return
                read_window(ctx, job, item, runner)
        finally:
            snapshot.worker_finished(completed=completed)
            if snapshot.done.is_set() and completed:
                ctx.log.info("snapshot_finished", job=job)

    for number in range(snapshot.workers):
        jobs.once(f"snapshot-{number}", worker)


def read_window(ctx: SyncContext, job: str, progress: WindowProgress, runner: StepRunner) -> None:
    """Read one window to its end from where its committed cursor says."""
    window = progress.window
    cursor = progress.cursor
    issued_at = progress.cursor_issued_at
    done = False

    def step() -> None:
        nonlocal cursor, issued_at, done
        try:
            page = ctx.records_page(window.start, window.end, cursor, Priority.SNAPSHOT)
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
                ctx.warehouse.restart_window(ctx.options.merchant_id, job, window)
            cursor, issued_at = None, None
            return
        position = cursor or f"first:{window.start.isoformat()}/{window.end.isoformat()}"
        if cursor is None:
            issued_at = page.projection_as_of
        finished = not page.has_more
        started = time.perf_counter()
        with ctx.writer:
            ctx.warehouse.commit_window_page(
                ctx.options.merchant_id,
                job,
                window,
                records=page.records,
                rejected=page.rejected,
                next_cursor=None if finished else page.next_cursor,
                cursor_issued_at=issued_at,
                done=finished,
                position=position,
            )
        ctx.observer.page_written(job, time.perf_counter() - started)
        ctx.after_commit(job, page.records, page.rejected, page.request_id)
        ctx.observer.window_page(job, window, len(page.records), done=finished)
        if finished and job == REBUILD_JOB:
            state = ctx.warehouse.load_state(ctx.options.merchant_id)
            if state is not None and state.phase is Phase.TAILING:
                ctx.phase(Phase.TAILING.value)
        cursor, done = page.next_cursor, finished

    while not done:
        runner.run(step, what=f"{job} window {window.start.isoformat()}")
    ctx.log.debug("window_done", job=job, window_start=window.start.isoformat())
