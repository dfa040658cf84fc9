"""The sync engine: anchor, snapshot windows and the change tail, as one code path for the
daemon (``run``) and the one-shot range backfill (``backfill``).

The shape follows the spec's "Rebuild without gaps" (Records endpoints):

1. anchor: ``record-changes?from_now=true``, keep ``next_cursor`` (persisted with the plan of
   snapshot windows in one transaction, so a restart never re-anchors by accident);
2. snapshot ``[history_from, snapshot_end(anchor))`` with ``records`` in windows of at most
   24 h, every page committed with its window's cursor;
3. tail ``record-changes`` from the anchor, every ``next_cursor`` committed with its page.

The tail starts as soon as the anchor exists and runs alongside the snapshot with priority
on the shared rate budget, so a week-long backfill never leaves today's data a week stale;
that is safe because the warehouse keeps the highest revision whatever the arrival order.
Snapshot windows are fetched by a few workers to hide request latency; every request goes
through the one budget and commits are serialised by one writer lock unless the warehouse
takes concurrent commits (PostgreSQL, ``Warehouse.concurrent_writes``).  Pages are streamed
and dropped after their commit: memory does not grow with the history.

The work runs as APScheduler jobs, each with one instance and coalescing: the tail drains
its backlog on an interval of ``poll_interval`` (a run that outlasts the interval is never
doubled), each snapshot worker is a job, and the drift check is a periodic job at the
lowest budget priority.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import structlog
from apscheduler.events import EVENT_JOB_ERROR, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from recordsync.core.errors import (
    ConfigurationError,
    CursorExpiredError,
    ProtocolError,
    ShutdownRequestedError,
)
from recordsync.core.models import Record, RecordsPage, RejectedItem
from recordsync.core.state import REBUILD_JOB, Phase, SyncState, WindowProgress, backfill_job
from recordsync.core.stopping import Stopper
from recordsync.logs import process_context
from recordsync.platform.budget import Priority
from recordsync.sync.drift import DriftTally, last_closed_day
from recordsync.sync.events import SyncObserver
from recordsync.sync.plan import (
    DEFAULT_SNAPSHOT_OVERLAP,
    describe_windows,
    hand_out_order,
    highest_sequence,
    plan_windows,
    snapshot_end,
)
from recordsync.sync.ports import RecordSource, SyncStore
from recordsync.sync.resilience import StepRunner

log = structlog.get_logger("recordsync.sync")

DEFAULT_DRIFT_INTERVAL = 3600.0


@dataclass(frozen=True, slots=True)
class SyncOptions:
    merchant_id: str
    history_from: datetime | None
    page_size: int = 1000
    poll_interval: float = 1.0
    snapshot_concurrency: int = 4
    snapshot_overlap: timedelta = DEFAULT_SNAPSHOT_OVERLAP
    # Seconds between drift checks of the last closed day; None turns them off.
    drift_interval: float | None = DEFAULT_DRIFT_INTERVAL
    # Demo and tests: stop once the snapshot is done and the tail has no backlog.
    stop_when_caught_up: bool = False


class _Outcome(Enum):
    STOPPED = "stopped"
    REBUILD = "rebuild"


@dataclass(frozen=True, slots=True)
class BackfillResult:
    job: str
    windows: int
    records: int


class _Jobs:
    """One generation's APScheduler: jobs with one instance each, errors surfaced.

    An exception escaping a job (a bug, or a fatal error in a one-shot backfill) stops the
    generation and is raised again in the thread that waits, so nothing fails silently in
    a worker thread while the daemon looks alive.
    """

    def __init__(self, stopper: Stopper, workers: int) -> None:
        self.stopper = stopper
        self.failures: list[BaseException] = []
        self.scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=workers)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=UTC,
        )
        self.scheduler.add_listener(self._failed, EVENT_JOB_ERROR)

    def _failed(self, event: JobExecutionEvent) -> None:
        if event.exception is not None:
            self.failures.append(event.exception)
        self.stopper.stop()

    def once(self, job_id: str, func: Callable[[], None]) -> None:
        self.scheduler.add_job(
            _quiet(func), id=job_id, name=job_id, next_run_time=datetime.now(UTC)
        )

    def every(self, job_id: str, seconds: float, func: Callable[[], None], *, now: bool) -> None:
        # APScheduler reads next_run_time=None as "paused": leave it out to follow the trigger.
        first_run = {"next_run_time": datetime.now(UTC)} if now else {}
        self.scheduler.add_job(
            _quiet(func),
            IntervalTrigger(seconds=seconds, timezone=UTC),
            id=job_id,
            name=job_id,
            **first_run,
        )

    def run_until_stopped(self, done: threading.Event | None = None) -> None:
        """Start the jobs; return when the stopper stops (or ``done`` is set), jobs finished."""
        self.scheduler.start()
        try:
            while not self.stopper.wait(0.2):
                if done is not None and done.is_set():
                    break
        finally:
            self.stopper.stop()
            self.scheduler.shutdown(wait=True)
        if self.failures:
            raise self.failures[0]


def _quiet(func: Callable[[], None]) -> Callable[[], None]:
    """A stop unwinds a job quietly; anything else reaches the scheduler's error listener."""

    def job() -> None:
        try:
            func()
        except ShutdownRequestedError:
            return

    return job


class _Snapshot:
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


class SyncEngine:
    def __init__(
        self,
        *,
        client: RecordSource,
        warehouse: SyncStore,
        options: SyncOptions,
        stopper: Stopper,
        observer: SyncObserver | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.warehouse = warehouse
        self.options = options
        self.stopper = stopper
        self.observer = observer or SyncObserver()
        self.rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        # Commits wait for one another unless the warehouse takes them side by side.
        self._writer: AbstractContextManager[Any] = (
            nullcontext() if warehouse.concurrent_writes else threading.Lock()
        )
        self._caught_up = threading.Event()
        self._log = log.bind(merchant_id=options.merchant_id)

    # -- the daemon -------------------------------------------------------------------------

    def run(self) -> bool:
        """Sync until stopped: anchor if needed, then snapshot and tail side by side.

        Returns True when it stopped because it caught up (``stop_when_caught_up``), False
        on a stop from outside (a signal, a lost lease).
        """
        runner = self._runner(self.stopper, fatal_is_final=False)
        try:
            state = runner.run(self._load_or_anchor, what="anchor")
            while True:
                outcome = self._run_generation(state)
                if outcome is _Outcome.STOPPED:
                    return self._caught_up.is_set()
                self._phase("rebuilding")
                state = runner.run(self._rebuild, what="rebuild")
        except ShutdownRequestedError:
            return self._caught_up.is_set()

    def _phase(self, phase: str) -> None:
        process_context.update(merchant_id=self.options.merchant_id, phase=phase)
        self.observer.phase_changed(phase)

    def _load_or_anchor(self) -> SyncState:
        state = self.warehouse.load_state(self.options.merchant_id)
        if state is not None:
            self._phase(state.phase.value)
            self._log.info("state_loaded", phase=state.phase.value, rebuilds=state.rebuilds)
            return state
        if self.options.history_from is None:
            raise ConfigurationError(
                "RECORDSYNC_HISTORY_FROM: required on the first start (no sync state yet)"
            )
        self._phase("anchoring")
        return self._anchor(self.options.history_from, rebuild_reason=None)

    def _rebuild(self) -> SyncState:
        state = self.warehouse.load_state(self.options.merchant_id)
        history_from = self.options.history_from or (state.history_from if state else None)
        if history_from is None:
            raise ConfigurationError("RECORDSYNC_HISTORY_FROM: required to rebuild the history")
        return self._anchor(history_from, rebuild_reason="change cursor expired")

    def _anchor(self, history_from: datetime, *, rebuild_reason: str | None) -> SyncState:
        """Anchor the change stream first, then plan the snapshot from the platform's time.

        Items on a ``from_now`` page (the spec says there are none) need no special care:
        they are changes of records that existed at the anchor, which the snapshot (read
        later, at a newer watermark) covers at the same or a higher revision.
        """
        page = self.client.changes(from_now=True, limit=1, priority=Priority.TAIL)
        if page.projection_as_of is None:
            raise ProtocolError(
                "the anchor page carries no projection_as_of: the snapshot end cannot be "
                "derived from the platform's time",
                endpoint="record-changes",
                request_id=page.request_id,
            )
        end = snapshot_end(page.projection_as_of, self.options.snapshot_overlap)
        windows = plan_windows(history_from, end) if history_from < end else []
        with self._writer:
            state = self.warehouse.start_rebuild(
                self.options.merchant_id,
                change_cursor=page.next_cursor,
                anchor_at=page.projection_as_of,
                history_from=history_from,
                snapshot_to=end,
                windows=windows,
            )
        self._phase(state.phase.value)
        fields: dict[str, Any] = {
            "anchor_at": page.projection_as_of.isoformat(),
            "snapshot": describe_windows(windows),
            "request_id": page.request_id,
        }
        if rebuild_reason is None:
            self._log.info("anchored", **fields)
        else:
            self.observer.rebuild_started(rebuild_reason)
            self._log.error(
                "rebuild_started", reason=rebuild_reason, rebuilds=state.rebuilds, **fields
            )
        return state

    def _run_generation(self, state: SyncState) -> _Outcome:
        """Tail, snapshot workers and drift checks until a stop or an expired change cursor."""
        generation = Stopper(parent=self.stopper)
        rebuild = threading.Event()
        tail = _Tail(position=state.change_cursor)
        snapshot = self._plan_snapshot(REBUILD_JOB, generation)
        jobs = _Jobs(generation, workers=self.options.snapshot_concurrency + 3)
        jobs.every(
            "tail",
            self.options.poll_interval,
            lambda: self._drain_tail(tail, generation, rebuild, snapshot),
            now=True,
        )
        if snapshot is not None:
            self._schedule_snapshot(jobs, REBUILD_JOB, snapshot, generation, fatal_is_final=False)
        if self.options.drift_interval:
            jobs.every(
                "drift-check",
                self.options.drift_interval,
                lambda: self._check_drift(generation),
                now=False,
            )
        jobs.run_until_stopped()
        if rebuild.is_set() and not self.stopper.stopped:
            return _Outcome.REBUILD
        return _Outcome.STOPPED

    # -- the tail ---------------------------------------------------------------------------

    def _drain_tail(
        self,
        tail: _Tail,
        stopper: Stopper,
        rebuild: threading.Event,
        snapshot: _Snapshot | None,
    ) -> None:
        """Read changes until there is no backlog; the interval trigger polls again."""
        runner = self._runner(stopper, fatal_is_final=False)
        while not stopper.stopped:
            has_more = runner.run(lambda: self._tail_step(tail, stopper, rebuild), what="tail")
            if rebuild.is_set() or not has_more:
                break
        snapshot_done = snapshot is None or snapshot.done.is_set()
        if self.options.stop_when_caught_up and snapshot_done and not rebuild.is_set():
            self._caught_up.set()
            self._log.info("caught_up")
            self.stopper.stop()

    def _tail_step(self, tail: _Tail, stopper: Stopper, rebuild: threading.Event) -> bool:
        try:
            page = self.client.changes(
                cursor=tail.position, limit=self.options.page_size, priority=Priority.TAIL
            )
        except CursorExpiredError as exc:
            self._log.error(
                "change_cursor_expired",
                error=str(exc),
                request_id=exc.request_id,
                action="rebuild: new anchor and a new snapshot; existing rows are kept",
            )
            rebuild.set()
            stopper.stop()
            return False
        records = [change.record for change in page.changes]
        last_sequence = highest_sequence(page.changes)
        started = time.perf_counter()
        with self._writer:
            self.warehouse.commit_tail_page(
                self.options.merchant_id,
                records=records,
                rejected=page.rejected,
                next_cursor=page.next_cursor,
                last_sequence=last_sequence,
                projection_as_of=page.projection_as_of,
                position=tail.position,
                changes=page.changes,
            )
        self.observer.page_written("tail", time.perf_counter() - started)
        tail.position = page.next_cursor
        self._after_commit("tail", records, page.rejected, page.request_id)
        self.observer.tail_page(
            len(page.changes),
            has_more=page.has_more,
            projection_as_of=page.projection_as_of,
            last_sequence=last_sequence,
        )
        if page.changes or page.rejected:
            self._log.debug(
                "tail_page_committed",
                changes=len(page.changes),
                has_more=page.has_more,
                last_sequence=last_sequence,
                request_id=page.request_id,
            )
        return page.has_more

    # -- snapshot windows -------------------------------------------------------------------

    def backfill(self, start: datetime, end: datetime) -> BackfillResult:
        """Snapshot ``[start, end)`` alone, resumably, without touching the tail's state."""
        if not start < end:
            raise ConfigurationError("backfill: --from must be earlier than --to")
        job = backfill_job(start, end)
        self._phase("backfill")
        with self._writer:
            self.warehouse.ensure_job(self.options.merchant_id, job, plan_windows(start, end))
        generation = Stopper(parent=self.stopper)
        snapshot = self._plan_snapshot(job, generation)
        if snapshot is not None:
            jobs = _Jobs(generation, workers=self.options.snapshot_concurrency)
            self._schedule_snapshot(jobs, job, snapshot, generation, fatal_is_final=True)
            jobs.run_until_stopped(done=snapshot.done)
        progress = self.warehouse.load_windows(self.options.merchant_id, job)
        return BackfillResult(
            job=job, windows=len(progress), records=sum(item.records for item in progress)
        )

    def _plan_snapshot(self, job: str, stopper: Stopper) -> _Snapshot | None:
        runner = self._runner(stopper, fatal_is_final=False)
        progress = runner.run(
            lambda: self.warehouse.load_windows(self.options.merchant_id, job),
            what="load windows",
        )
        pending = [item for item in progress if not item.done]
        self.observer.windows_planned(job, len(progress), len(progress) - len(pending))
        if not pending:
            return None
        self._log.info("snapshot_started", job=job, windows=len(progress), pending=len(pending))
        return _Snapshot(pending, workers=min(self.options.snapshot_concurrency, len(pending)))

    def _schedule_snapshot(
        self,
        jobs: _Jobs,
        job: str,
        snapshot: _Snapshot,
        stopper: Stopper,
        *,
        fatal_is_final: bool,
    ) -> None:
        runner = self._runner(stopper, fatal_is_final=fatal_is_final)

        def worker() -> None:
            completed = False
            try:
                while not stopper.stopped:
                    try:
                        item = snapshot.queue.get_nowait()
                    except queue.Empty:
                        completed = True
                        return
                    self._read_window(job, item, runner)
            finally:
                snapshot.worker_finished(completed=completed)
                if snapshot.done.is_set() and completed:
                    self._log.info("snapshot_finished", job=job)

        for number in range(snapshot.workers):
            jobs.once(f"snapshot-{number}", worker)

    def _read_window(self, job: str, progress: WindowProgress, runner: StepRunner) -> None:
        window = progress.window
        cursor = progress.cursor
        issued_at = progress.cursor_issued_at
        done = False

        def step() -> None:
            nonlocal cursor, issued_at, done
            try:
                page = self._records_page(window.start, window.end, cursor, Priority.SNAPSHOT)
            except CursorExpiredError as exc:
                if cursor is None:
                    raise
                # Spec: a records cursor is valid 24 h from its first issue.  The chain is
                # one snapshot, so a half-read chain cannot be continued: read the window
                # again from its start (rows already written stay; newer ones win).
                self._log.warning(
                    "window_cursor_expired",
                    job=job,
                    window_start=window.start.isoformat(),
                    request_id=exc.request_id,
                    action="restarting the window from its start",
                )
                with self._writer:
                    self.warehouse.restart_window(self.options.merchant_id, job, window)
                cursor, issued_at = None, None
                return
            position = cursor or f"first:{window.start.isoformat()}/{window.end.isoformat()}"
            if cursor is None:
                issued_at = page.projection_as_of
            finished = not page.has_more
            started = time.perf_counter()
            with self._writer:
                self.warehouse.commit_window_page(
                    self.options.merchant_id,
                    job,
                    window,
                    records=page.records,
                    rejected=page.rejected,
                    next_cursor=None if finished else page.next_cursor,
                    cursor_issued_at=issued_at,
                    done=finished,
                    position=position,
                )
            self.observer.page_written(job, time.perf_counter() - started)
            self._after_commit(job, page.records, page.rejected, page.request_id)
            self.observer.window_page(job, window, len(page.records), done=finished)
            if finished and job == REBUILD_JOB:
                state = self.warehouse.load_state(self.options.merchant_id)
                if state is not None and state.phase is Phase.TAILING:
                    self._phase(Phase.TAILING.value)
            cursor, done = page.next_cursor, finished

        while not done:
            runner.run(step, what=f"{job} window {window.start.isoformat()}")
        self._log.debug("window_done", job=job, window_start=window.start.isoformat())

    def _records_page(
        self, start: datetime, end: datetime, cursor: str | None, priority: Priority
    ) -> RecordsPage:
        if cursor is None:
            return self.client.records_first(
                start, end, limit=self.options.page_size, priority=priority
            )
        return self.client.records_next(cursor, limit=self.options.page_size, priority=priority)

    # -- the drift check --------------------------------------------------------------------

    def _check_drift(self, stopper: Stopper) -> None:
        """Re-read the last closed day at the lowest priority; count rows behind the platform."""
        state = self.warehouse.load_state(self.options.merchant_id)
        if state is None or state.phase is not Phase.TAILING:
            return  # the snapshot is still filling the warehouse: nothing to compare yet
        platform_now = state.last_projection_as_of or state.anchor_at
        window = last_closed_day(platform_now)
        runner = self._runner(stopper, fatal_is_final=False)
        tally = DriftTally()
        cursor: str | None = None
        while True:
            page = runner.run(
                lambda at=cursor: self._records_page(  # type: ignore[misc]
                    window.start, window.end, at, Priority.BACKGROUND
                ),
                what="drift check",
            )
            ids = [record.record_id for record in page.records]
            stored = self.warehouse.stored_revisions(self.options.merchant_id, ids)
            current = self.warehouse.load_state(self.options.merchant_id)
            tally.add(
                page.records,
                stored,
                covered_until=current.last_projection_as_of if current else None,
            )
            if not page.has_more:
                break
            cursor = page.next_cursor
        self.observer.drift_checked(window, tally.rows_behind)
        fields = {
            "window_start": window.start.isoformat(),
            "checked": tally.checked,
            "behind": tally.behind,
            "missing": tally.missing,
            "still_arriving": tally.ignored_recent,
        }
        if tally.rows_behind:
            self._log.error(
                "drift_found", action="alert: investigate; nothing was changed", **fields
            )
        else:
            self._log.info("drift_checked", **fields)

    # -- shared -----------------------------------------------------------------------------

    def _runner(self, stopper: Stopper, *, fatal_is_final: bool) -> StepRunner:
        return StepRunner(
            stopper=stopper,
            observer=self.observer,
            fatal_is_final=fatal_is_final,
            rng=random.Random(self.rng.random()),  # noqa: S311 - jitter, not cryptography
        )

    def _after_commit(
        self,
        source: str,
        records: Sequence[Record],
        rejected: Sequence[RejectedItem],
        request_id: str | None,
    ) -> None:
        """Say loudly what was quarantined or unusual; never drop it silently."""
        if rejected:
            self.observer.quarantined(source, len(rejected))
            self._log.warning(
                "records_quarantined",
                source=source,
                count=len(rejected),
                first_reason=rejected[0].reason,
                record_ids=[item.record_id for item in rejected[:5]],
                request_id=request_id,
            )
        unknown = Counter(record.status for record in records if not record.status_known)
        if unknown:
            self._log.warning(
                "unknown_record_status",
                source=source,
                statuses=dict(unknown),
                request_id=request_id,
                action="stored as received",
            )


@dataclass
class _Tail:
    """The tail's position in memory; the committed copy lives in ``sync_state``."""

    position: str
