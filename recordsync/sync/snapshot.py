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
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from recordsync.core.errors import ConfigurationError, CursorExpiredError
from recordsync.core.models import RecordsPage
from recordsync.core.state import (
    REBUILD_JOB,
    Phase,
    Window,
    WindowPage,
    WindowProgress,
    backfill_job,
)
from recordsync.core.stopping import Stopper
from recordsync.core.times import MILLISECOND
from recordsync.core.waiting import Deferred
from recordsync.platform.budget import Pace, Priority
from recordsync.sync.context import SyncContext
from recordsync.sync.indexes import build_bi_indexes, defer_bi_indexes
from recordsync.sync.jobs import JobHost, Jobs
from recordsync.sync.plan import hand_out_order
from recordsync.sync.resilience import StepRunner
from recordsync.sync.windows import (
    MAX_CHAINS,
    carry_over,
    chains_needed,
    plan_for_chains,
    resplit,
    resplit_parts,
)


@dataclass(frozen=True, slots=True)
class BackfillResult:
    job: str
    windows: int
    records: int


class PendingWindows:
    """The windows of one job still to read, shared by its worker jobs in hand-out order.

    Workers take windows until none is left; a chain that re-splits the rest of its window
    (``windows.resplit``) offers the new pieces here, and more workers are started for them
    (``spawn``, set by ``schedule_snapshot``), up to ``most_workers``.  ``done`` is set when
    the last worker finds nothing left to read.

    ``on_progress`` is told ``(total, finished)`` under the lock whenever either changes, so
    its reports can never arrive out of order: reported after the lock, a cut's count taken
    before another chain's window ended could land after it and set the progress back (the
    metric then ended at 3 of 4 windows done for a job that was done).
    """

    def __init__(
        self,
        pending: Sequence[WindowProgress],
        workers: int,
        *,
        total: int | None = None,
        most_workers: int | None = None,
    ) -> None:
        self.queue: deque[WindowProgress] = deque(hand_out_order(pending))
        self.workers = workers
        self.most_workers = max(workers, most_workers or workers)
        self.total = len(pending) if total is None else total
        self.finished = self.total - len(pending)
        self.running = 0  # workers started and not yet finished
        self.in_flight = 0  # windows taken by a worker and not finished
        self.reserved = 0  # windows a chain is cutting from its own, not yet queued
        self.abandoned = False
        self.spawn: Callable[[int], None] | None = None
        self.on_progress: Callable[[int, int], None] | None = None
        # Set by ``schedule_snapshot``: the job's stop, and who hears that its last worker ended.
        self.stopper: Stopper | None = None
        self.on_end: Callable[[], None] | None = None
        # Moving average of a page's time from its parsed answer to its chain's next request:
        # its wait for the writer and its commit.  It is part of every chain's cycle,
        # so chains_needed counts it (the commit alone, 0.1 s here, left out the wait behind
        # another chain's commit: 0.3 s a page in all, and one chain too few, 1b).
        self.work_seconds: float | None = None
        # Each window being read: (pages read, milliseconds covered, pages left) as its chain
        # last reported them, None before its first page; what the cuts share out.
        self.reading: dict[Window, tuple[float, float, float] | None] = {}
        self.done = threading.Event()
        self.lock = threading.Lock()

    def start(self) -> int:
        with self.lock:
            self.running += self.workers
        return self.workers

    def take(self) -> WindowProgress | None:
        """The next window to read, or None: this worker ends (the last one sets ``done``)."""
        with self.lock:
            if self.queue:
                self.in_flight += 1
                item = self.queue.popleft()
                self.reading[item.window] = None
                return item
            self.running -= 1
            ended = self.running == 0
            if ended and not self.abandoned:
                self.done.set()
        if ended:
            self._ended()
        return None

    def window_finished(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.finished += 1
            self._progressed()

    def _progressed(self) -> None:
        """Report the progress; under the lock (see the class docstring)."""
        if self.on_progress is not None:
            self.on_progress(self.total, self.finished)

    def worker_stopped(self, *, reading: bool) -> None:
        """A worker ends without finishing (a stop or an error): the job is not done."""
        with self.lock:
            self.abandoned = True
            self.running -= 1
            if reading:
                self.in_flight -= 1
            ended = self.running == 0
        if ended:
            self._ended()

    @property
    def wants_budget(self) -> bool:
        """Workers are reading (or waiting to read on) and the job was not stopped: the tail
        leaves the budget to them (``demand``)."""
        stopper = self.stopper
        return self.running > 0 and not (stopper is not None and stopper.stopped)

    def _ended(self) -> None:
        if self.on_end is not None:
            self.on_end()

    def committed(self, window: Window, seconds: float, *, finished: bool) -> None:
        """A page of ``window`` was answered ``seconds`` ago and is committed; ``finished``:
        its last."""
        with self.lock:
            if finished:
                self.reading.pop(window, None)
            previous = self.work_seconds
            self.work_seconds = seconds if previous is None else previous + (seconds - previous) / 4

    def report(self, window: Window, *, read: float, covered_ms: float, left: float) -> None:
        """A chain committed a page of ``window``: ``read`` pages so far over ``covered_ms``
        of it, about ``left`` pages to go (0: it is done)."""
        with self.lock:
            if left > 0:
                self.reading[window] = (read, covered_ms, left)
            else:
                self.reading.pop(window, None)

    def pages_left(self, window: Window) -> float:
        """What ``window``'s chain has left to read: as it last reported, or for a window not
        measured yet its length at the density measured so far (infinite before any: the
        job's first pages go in the order they ask).  Its requests' rank in the budget."""
        with self.lock:
            report = self.reading.get(window)
            if report is not None:
                return report[2]
            per_ms = self._pages_per_ms()
            if per_ms <= 0:
                return math.inf
            return per_ms * ((window.end - window.start) / MILLISECOND)

    def _pages_per_ms(self) -> float:
        """The density the chains measured so far (0 before any report); under the lock."""
        reports = [item for item in self.reading.values() if item is not None]
        read = sum(item[0] for item in reports)
        covered = sum(item[1] for item in reports)
        return read / covered if covered > 0 else 0.0

    def pages_elsewhere(self, window: Window) -> float:
        """The pages left to read outside ``window``: what the other chains reported, and
        for windows not yet measured (queued, or just taken) their length at the density
        the chains measured so far."""
        with self.lock:
            per_ms = self._pages_per_ms()
            unmeasured = [item.window for item in self.queue]
            unmeasured += [key for key, item in self.reading.items() if item is None]
            return sum(
                item[2] for key, item in self.reading.items() if item is not None and key != window
            ) + per_ms * sum(
                (piece.end - piece.start) / MILLISECOND for piece in unmeasured if piece != window
            )

    def chains_wanted(self, pace: Pace) -> int | None:
        """Chains that keep the budget busy at the measured round trip (None: not measured)."""
        if pace.round_trip is None:
            return None
        return chains_needed(
            requests=pace.requests,
            seconds=pace.seconds,
            margin=pace.margin,
            round_trip=pace.round_trip,
            work=self.work_seconds or 0.0,
        )

    def grow(self, wanted: int) -> None:
        """Start workers for queued windows while fewer run than ``wanted`` chains: a job
        of more windows than configured workers (a week at 3 s) needs them, not cuts."""
        with self.lock:
            started = min(min(wanted, self.most_workers) - self.running, len(self.queue))
            self.running += max(started, 0)
        if started > 0 and self.spawn is not None:
            self.spawn(started)

    def reserve(self, wanted: int, pages_left: float, others_left: float) -> int:
        """Into how many windows this chain cuts the rest of its own; the new ones count as
        queued at once, so two chains deciding together do not both cut for the same gap
        (``offer`` or ``release`` settles the reservation)."""
        with self.lock:
            parts = resplit_parts(
                wanted=wanted,
                in_flight=self.in_flight,
                queued=len(self.queue) + self.reserved,
                pages_left=pages_left,
                others_left=others_left,
            )
            self.reserved += parts - 1
            return parts

    def release(self, parts: int) -> None:
        with self.lock:
            self.reserved -= parts - 1

    def offer(
        self, window: Window, cut: Sequence[Window], pieces: Sequence[WindowProgress]
    ) -> None:
        """A chain's ``window`` was cut into the windows ``cut``, read on by that chain but
        ``pieces``, which are queued, with new workers for them where allowed."""
        with self.lock:
            self.reading.pop(window, None)
            self.reading[cut[0]] = None
            self.reserved -= len(pieces)
            self.queue.extend(pieces)
            self.total += len(cut)
            self.finished += 1  # the window that was cut ends where its pieces begin
            started = min(len(pieces), self.most_workers - self.running)
            self.running += max(started, 0)
            self._progressed()
        if started > 0 and self.spawn is not None:
            self.spawn(started)

    def claim_following(
        self, window: Window, read_up_to: datetime, wanted: int
    ) -> tuple[WindowProgress, Window] | None:
        """The queued window that starts where ``window`` ends, taken off the queue, and the
        window joining it to the rest of ``window`` (``windows.carry_over``), for this chain
        to read on in (``carry_into`` or ``unclaim`` settles it).  None when there is no such
        unread window, when the two would not fit in 24 h, or when without it fewer windows
        than the ``wanted`` chains would be left to read.  Decided under the lock, so that no
        other worker sees the queue without the window unless it is carried."""
        with self.lock:
            if self.in_flight + len(self.queue) + self.reserved - 1 < wanted:
                return None
            for item in self.queue:
                if (
                    item.window.start == window.end
                    and item.cursor is None
                    and not item.done
                    and item.records == 0
                ):
                    joined = carry_over(window, item.window, read_up_to)
                    if joined is None:
                        return None
                    self.queue.remove(item)
                    return item, joined
            return None

    def unclaim(self, item: WindowProgress) -> None:
        """The carry was not committed: the window is queued again (this chain's worker takes
        windows until none is left, so it is read even if every other worker has ended)."""
        with self.lock:
            self.queue.appendleft(item)

    def carry_into(self, window: Window, joined: Window) -> None:
        """``window``'s chain reads on in ``joined``, its rest and the window it claimed."""
        with self.lock:
            self.reading.pop(window, None)
            self.reading[joined] = None
            self.finished += 1  # the window ends where the joined one begins
            self._progressed()


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

    Equal, not UTC days: a job ends when its longest chain ends, and the chains that outlive
    the others run too few to keep the budget busy.  A week and an hour by days is six whole
    days and two partial ones, so at a 3 s round trip the last 100 s ran six chains where
    seven were needed (bench/README.md, 1b).  The chains cut their windows further as they
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
    equal windows lost 2.4 % of the budget to them (bench/README.md, 1b).  Carried over, the
    two windows end on one.  Committed before the joined window is read, like a cut: a
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
