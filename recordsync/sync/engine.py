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
Snapshot windows are fetched concurrently to hide request latency; every request goes through
the one budget and commits are serialised by one writer lock.  Pages are streamed and
dropped after their commit: memory does not grow with the history.
"""

from __future__ import annotations

import queue
import random
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

import structlog

from recordsync.budget import Priority
from recordsync.client import PlatformClient
from recordsync.errors import (
    ConfigurationError,
    CursorExpiredError,
    ProtocolError,
    ShutdownRequestedError,
)
from recordsync.models import Record, RejectedItem
from recordsync.state import REBUILD_JOB, SyncState, WindowProgress, backfill_job
from recordsync.stopping import Stopper
from recordsync.sync.events import SyncObserver
from recordsync.sync.plan import (
    DEFAULT_SNAPSHOT_OVERLAP,
    describe_windows,
    highest_sequence,
    plan_windows,
    snapshot_end,
)
from recordsync.sync.resilience import StepRunner
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync.sync")


@dataclass(frozen=True, slots=True)
class SyncOptions:
    merchant_id: str
    history_from: datetime | None
    page_size: int = 1000
    poll_interval: float = 1.0
    snapshot_concurrency: int = 4
    snapshot_overlap: timedelta = DEFAULT_SNAPSHOT_OVERLAP
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


class SyncEngine:
    def __init__(
        self,
        *,
        client: PlatformClient,
        warehouse: Warehouse,
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
        self._writer = threading.Lock()
        self._caught_up = threading.Event()
        self._log = log.bind(merchant_id=options.merchant_id)

    # -- the daemon -------------------------------------------------------------------------

    def run(self) -> bool:
        """Sync until stopped: anchor if needed, then snapshot and tail side by side.

        Returns True when it stopped because it caught up (``stop_when_caught_up``), False
        on a stop from outside (a signal).
        """
        runner = self._runner(self.stopper, fatal_is_final=False)
        try:
            state = runner.run(self._load_or_anchor, what="anchor")
            while True:
                outcome = self._run_generation(state)
                if outcome is _Outcome.STOPPED:
                    return self._caught_up.is_set()
                state = runner.run(self._rebuild, what="rebuild")
        except ShutdownRequestedError:
            return self._caught_up.is_set()

    def _load_or_anchor(self) -> SyncState:
        state = self.warehouse.load_state(self.options.merchant_id)
        if state is not None:
            self._log.info("state_loaded", phase=state.phase.value, rebuilds=state.rebuilds)
            return state
        if self.options.history_from is None:
            raise ConfigurationError(
                "RECORDSYNC_HISTORY_FROM: required on the first start (no sync state yet)"
            )
        return self._anchor(self.options.history_from, rebuilds_reason=None)

    def _rebuild(self) -> SyncState:
        state = self.warehouse.load_state(self.options.merchant_id)
        history_from = self.options.history_from or (state.history_from if state else None)
        if history_from is None:
            raise ConfigurationError("RECORDSYNC_HISTORY_FROM: required to rebuild the history")
        return self._anchor(history_from, rebuilds_reason="change cursor expired")

    def _anchor(self, history_from: datetime, *, rebuilds_reason: str | None) -> SyncState:
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
        if rebuilds_reason is None:
            self._log.info(
                "anchored",
                anchor_at=page.projection_as_of.isoformat(),
                snapshot=describe_windows(windows),
                request_id=page.request_id,
            )
        else:
            self.observer.rebuild_started(rebuilds_reason)
            self._log.error(
                "rebuild_started",
                reason=rebuilds_reason,
                rebuilds=state.rebuilds,
                anchor_at=page.projection_as_of.isoformat(),
                snapshot=describe_windows(windows),
                request_id=page.request_id,
            )
        return state

    def _run_generation(self, state: SyncState) -> _Outcome:
        """Tail and snapshot workers until a stop (shutdown) or an expired change cursor."""
        generation = Stopper(parent=self.stopper)
        rebuild = threading.Event()
        snapshot_done = threading.Event()

        def tail() -> None:
            self._tail(state.change_cursor, generation, rebuild, snapshot_done)

        def snapshot() -> None:
            self._snapshot(REBUILD_JOB, generation)
            snapshot_done.set()

        run_threads({"tail": tail, "snapshot": snapshot}, generation)
        if rebuild.is_set() and not self.stopper.stopped:
            return _Outcome.REBUILD
        return _Outcome.STOPPED

    # -- the tail ---------------------------------------------------------------------------

    def _tail(
        self,
        cursor: str,
        stopper: Stopper,
        rebuild: threading.Event,
        snapshot_done: threading.Event,
    ) -> None:
        runner = self._runner(stopper, fatal_is_final=False)
        position = cursor

        def step() -> bool:
            nonlocal position
            try:
                page = self.client.changes(
                    cursor=position, limit=self.options.page_size, priority=Priority.TAIL
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
            with self._writer:
                self.warehouse.commit_tail_page(
                    self.options.merchant_id,
                    records=records,
                    rejected=page.rejected,
                    next_cursor=page.next_cursor,
                    last_sequence=last_sequence,
                    projection_as_of=page.projection_as_of,
                    position=position,
                )
            position = page.next_cursor
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

        try:
            while not stopper.stopped:
                has_more = runner.run(step, what="tail")
                if rebuild.is_set():
                    return
                if not has_more:
                    if self.options.stop_when_caught_up and snapshot_done.is_set():
                        self._caught_up.set()
                        self._log.info("caught_up")
                        self.stopper.stop()
                        return
                    stopper.sleep(self.options.poll_interval)
        except ShutdownRequestedError:
            return

    # -- snapshot windows -------------------------------------------------------------------

    def backfill(self, start: datetime, end: datetime) -> BackfillResult:
        """Snapshot ``[start, end)`` alone, resumably, without touching the tail's state."""
        if not start < end:
            raise ConfigurationError("backfill: --from must be earlier than --to")
        job = backfill_job(start, end)
        windows = plan_windows(start, end)
        with self._writer:
            self.warehouse.ensure_job(self.options.merchant_id, job, windows)
        self._snapshot(job, self.stopper, fatal_is_final=True)
        progress = self.warehouse.load_windows(self.options.merchant_id, job)
        return BackfillResult(
            job=job, windows=len(progress), records=sum(item.records for item in progress)
        )

    def _snapshot(self, job: str, stopper: Stopper, *, fatal_is_final: bool = False) -> None:
        """Read every unfinished window of ``job`` with a few concurrent workers."""
        runner = self._runner(stopper, fatal_is_final=fatal_is_final)
        try:
            progress = runner.run(
                lambda: self.warehouse.load_windows(self.options.merchant_id, job),
                what="load windows",
            )
        except ShutdownRequestedError:
            return
        pending = [item for item in progress if not item.done]
        self.observer.windows_planned(job, len(progress), len(progress) - len(pending))
        if not pending:
            return
        self._log.info("snapshot_started", job=job, windows=len(progress), pending=len(pending))
        work: queue.SimpleQueue[WindowProgress] = queue.SimpleQueue()
        for item in pending:
            work.put(item)

        def worker() -> None:
            while not stopper.stopped:
                try:
                    item = work.get_nowait()
                except queue.Empty:
                    return
                self._read_window(job, item, runner)

        count = min(self.options.snapshot_concurrency, len(pending))
        run_threads({f"snapshot-{n}": worker for n in range(count)}, stopper)
        if not stopper.stopped:
            self._log.info("snapshot_finished", job=job, windows=len(progress))

    def _read_window(self, job: str, progress: WindowProgress, runner: StepRunner) -> None:
        window = progress.window
        cursor = progress.cursor
        issued_at = progress.cursor_issued_at
        done = False

        def step() -> None:
            nonlocal cursor, issued_at, done
            try:
                if cursor is None:
                    page = self.client.records_first(
                        window.start, window.end, limit=self.options.page_size
                    )
                else:
                    page = self.client.records_next(cursor, limit=self.options.page_size)
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
            self._after_commit(job, page.records, page.rejected, page.request_id)
            self.observer.window_page(job, window, len(page.records), done=finished)
            cursor, done = page.next_cursor, finished

        while not done:
            runner.run(step, what=f"{job} window {window.start.isoformat()}")
        self._log.debug("window_done", job=job, window_start=window.start.isoformat())

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


def run_threads(targets: dict[str, Callable[[], None]], stopper: Stopper) -> None:
    """Run each target in its own thread and wait for all of them.

    A stop unwinds them quietly; any other exception stops the siblings (through
    ``stopper``) and is raised again here, in the calling thread, so a bug never leaves a
    half-alive daemon behind.
    """
    failures: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def body() -> None:
            try:
                target()
            except ShutdownRequestedError:
                return
            except BaseException as exc:  # re-raised in the calling thread  # noqa: BLE001
                failures.append(exc)
                stopper.stop()

        return body

    threads = [
        threading.Thread(target=guarded(target), name=name, daemon=True)
        for name, target in targets.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
