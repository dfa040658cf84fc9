"""Snapshot windows: ``records`` over a range in windows of at most 24 h, every page committed
with its window's cursor (spec, Records endpoints, "Rebuild without gaps", step 2).  The
daemon reads the rebuild's windows ``[history_from, snapshot_end(anchor))``; the one-shot
range backfill reads its own, beside the tail, never touching the tail's state.

Windows are fetched by several workers to hide request latency; every request goes through
the one budget and commits are serialised by one writer lock unless the warehouse takes
concurrent commits (see ``context``).  A window is one cursor chain: when the measured round
trip wants more chains in flight than there are windows being read (a short history, the end
of a job), a chain cuts the rest of its window into more (``windows``), up to ``MAX_CHAINS``.
Pages are streamed and dropped after their commit: memory does not grow with the history.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from recordsync.core.errors import ConfigurationError
from recordsync.core.state import (
    Window,
    backfill_job,
)
from recordsync.core.stopping import Stopper
from recordsync.core.waiting import Deferred
from recordsync.sync.context import SyncContext
from recordsync.sync.indexes import build_bi_indexes, defer_bi_indexes
from recordsync.sync.jobs import JobHost, Jobs
from recordsync.sync.resilience import StepRunner
from recordsync.sync.snapshot.chain import WindowChain
from recordsync.sync.snapshot.pending_windows import PendingWindows
from recordsync.sync.windows import (
    MAX_CHAINS,
    chains_needed,
    plan_for_chains,
)


@dataclass(frozen=True, slots=True)
class BackfillResult:
    job: str
    windows: int
    records: int


def backfill(
    ctx: SyncContext,
    start: datetime,
    end: datetime,
    *,
    host: JobHost | None = None,
    job: str | None = None,
) -> BackfillResult:
    """Snapshot ``[start, end)`` alone, resumably, without touching the tail's state, as
    ``job`` (a backfill's by default; a resync names its own)."""
    if not start < end:
        raise ConfigurationError("backfill: --from must be earlier than --to")
    job = job or backfill_job(start, end)
    ctx.phase("backfill")
    with ctx.writer:
        ctx.warehouse.ensure_job(
            job,
            first_plan(ctx, start, end),
            defer_bi_indexes=defer_bi_indexes(ctx),
        )
    generation = Stopper(parent=ctx.stopper)
    snapshot = plan_snapshot(ctx, job, generation)
    if snapshot is not None:
        jobs = Jobs(generation, workers=snapshot.most_workers, host=host)
        schedule_snapshot(ctx, jobs, job, snapshot, generation, fatal_is_final=True)
        jobs.run_until_stopped(done=snapshot.done)
    progress = ctx.warehouse.load_windows(job)
    if progress and all(item.done for item in progress):
        # Inside the job's time: a bulk load ends indexed.
        build_bi_indexes(ctx, ctx.runner(ctx.stopper, fatal_is_final=False))
    return BackfillResult(
        job=job, windows=len(progress), records=sum(item.records for item in progress)
    )


def first_plan(ctx: SyncContext, start: datetime, end: datetime) -> list[Window]:
    """A new job's windows: equal ones of at most 24 h, at least as many as the chains it
    starts with (``starting_chains``).

    Equal, not UTC days: a job ends when its longest chain ends, and the chains that outlive the
    others run too few to keep the budget busy.  A week and an hour by days is six whole days and
    two partial ones, so at a 3 s round trip the last 100 s ran six chains where seven were
    needed (``bench/budget_utilisation.py``).  The chains cut their windows further as they
    go when the round trip wants more."""
    return plan_for_chains(start, end, starting_chains(ctx))


def starting_chains(ctx: SyncContext) -> int:
    """The chains a job starts with: as many as the round trip needs from its first second,
    and at least the chains configured (``snapshot_concurrency``).

    Before the first page is answered they are all the chains in flight: a one-day job at a
    3 s round trip that started with 4 and cut more only once answers came back ran at 0.53
    of the budget's ceiling.  The round trip known at the start is the capabilities call's
    (``RecordSource.pace``); none is known in a process that has not read them, which then
    starts with the chains configured.  The chains needed never exceed the job's share of
    the worker threads (``snapshot_most_chains``)."""
    concurrency = ctx.options.snapshot_concurrency
    pace = ctx.client.pace()
    if pace.round_trip is None:
        return concurrency
    needed = chains_needed(
        requests=pace.requests, seconds=pace.seconds, margin=pace.margin, round_trip=pace.round_trip
    )
    return max(concurrency, min(needed, most_chains(ctx)))


def most_chains(ctx: SyncContext) -> int:
    return max(ctx.options.snapshot_concurrency, ctx.options.snapshot_most_chains or MAX_CHAINS)


def plan_snapshot(ctx: SyncContext, job: str, stopper: Stopper) -> PendingWindows | None:
    """The job's windows still to read, or None when every one is done."""
    runner = ctx.runner(stopper, fatal_is_final=False)
    progress = runner.run(
        lambda: ctx.warehouse.load_windows(job),
        what="load windows",
    )
    pending = [item for item in progress if not item.done]
    ctx.observer.windows_planned(job, len(progress), len(progress) - len(pending))
    if not pending:
        return None
    ctx.log.info("snapshot_started", job=job, windows=len(progress), pending=len(pending))
    return PendingWindows(
        pending,
        workers=min(starting_chains(ctx), len(pending)),
        total=len(progress),
        most_workers=most_chains(ctx),
    )


def schedule_snapshot(
    ctx: SyncContext,
    jobs: Jobs,
    job: str,
    snapshot: PendingWindows,
    stopper: Stopper,
    *,
    fatal_is_final: bool,
    finished: Callable[[], None] | None = None,
) -> None:
    """One worker job per reader; each takes windows until none is left.  A chain that
    re-splits its window starts more workers for the pieces (``PendingWindows.offer``).
    ``finished`` runs in the worker that finds the job done (every window read)."""
    numbers = itertools.count()

    def spawn(count: int) -> None:
        for _ in range(count):
            worker = SnapshotWorker(
                ctx,
                job,
                snapshot,
                runner=ctx.runner(stopper, fatal_is_final=fatal_is_final),
                stopper=stopper,
                finished=finished,
            )
            jobs.once(f"snapshot-{next(numbers)}", worker.run)

    snapshot.spawn = spawn
    snapshot.on_progress = lambda total, done: ctx.observer.windows_planned(job, total, done)
    snapshot.stopper = stopper
    snapshot.on_end = ctx.demand.changed
    count = snapshot.start()
    ctx.demand.add(snapshot)
    spawn(count)


class SnapshotWorker:
    """One snapshot worker: takes windows and reads each to its end.  A run deferred by a
    failure (``core.waiting``) goes on where it stopped: the same window, the same page, or
    the job's end (``finished``) when that is what failed."""

    def __init__(
        self,
        ctx: SyncContext,
        job: str,
        snapshot: PendingWindows,
        *,
        runner: StepRunner,
        stopper: Stopper,
        finished: Callable[[], None] | None,
    ) -> None:
        self._ctx = ctx
        self._job = job
        self._snapshot = snapshot
        self._runner = runner
        self._stopper = stopper
        self._finished = finished
        self._chain: WindowChain | None = None
        self._finishing = False

    def run(self) -> None:
        snapshot = self._snapshot
        try:
            if self._finishing:
                self._finish()
                return
            while not self._stopper.stopped:
                if self._chain is None:
                    item = snapshot.take()
                    if item is None:
                        if snapshot.done.is_set():
                            self._ctx.log.info("snapshot_finished", job=self._job)
                            self._finishing = True
                            self._finish()
                        return
                    self._chain = WindowChain(self._ctx, self._job, item, snapshot)
                self._chain.read(self._runner)
                self._chain = None
                snapshot.window_finished()
            snapshot.worker_stopped(reading=False)
        except Deferred:
            raise  # still this job's worker: it runs again where it stopped
        except BaseException:
            snapshot.worker_stopped(reading=self._chain is not None)
            raise

    def _finish(self) -> None:
        if self._finished is not None:
            self._finished()
        self._finishing = False
