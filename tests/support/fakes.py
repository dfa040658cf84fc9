"""Fakes for the engine's unit tests: a scripted platform and an in-memory store.

They stand behind the sync's Protocols (``RecordSource`` and ``SyncStore``), so the engine's
decisions are tested without the simulator, sockets or a database.  The store keeps the
warehouse's rules that the engine relies on (a page and its cursor stored together, the
highest revision wins, the phase turns TAILING with the last rebuild window, ``ensure_job``
registers once); everything else about storage is tested against real databases.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from recordsync.core.errors import CursorExpiredError, ShutdownRequestedError
from recordsync.core.models import ChangesPage, Record, RecordsPage, RejectedItem
from recordsync.core.retention import PrunedBatch, RevisionKey
from recordsync.core.state import (
    REBUILD_JOB,
    Phase,
    SyncState,
    TailPage,
    Window,
    WindowPage,
    WindowProgress,
)
from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Pace, Priority
from recordsync.sync.context import SyncContext
from recordsync.sync.engine import SyncEngine, SyncOptions
from recordsync.sync.events import SyncObserver
from recordsync.sync.ports import RecordSource, SyncStore
from recordsync.sync.tail_pace import TailPacing
from support.warehouse_samples import make_change, make_record

MERCHANT = "m-unit"
# Platform time, far from the local clock on purpose: a boundary taken from the local clock
# instead of the platform's shows at once.
NOW = datetime(2024, 3, 5, 10, 30, 0, 123456, tzinfo=UTC)
HOUR = timedelta(hours=1)
MAX_CALLS = 500


def record(record_id: str, revision: int = 1, *, created: datetime, updated: datetime) -> Record:
    return make_record(record_id, revision, created_at=created, updated_at=updated)


def options(**changes: object) -> SyncOptions:
    """Small pages, a fast poll, no drift job, and a stop once caught up."""
    values: dict[str, object] = {
        "merchant_id": MERCHANT,
        "history_from": NOW - 30 * HOUR,
        "page_size": 2,
        "poll_interval": 0.01,
        "snapshot_concurrency": 2,
        "snapshot_overlap": timedelta(seconds=5),
        "drift_interval": None,
        "stop_when_caught_up": True,
    }
    values.update(changes)
    interval = values.pop("poll_interval")
    if "tail_pacing" not in values:
        values["tail_pacing"] = TailPacing(interval=float(interval))  # type: ignore[arg-type]
    return SyncOptions(**values)  # type: ignore[arg-type]


def expired(endpoint: str) -> CursorExpiredError:
    return CursorExpiredError(
        "cursor expired", endpoint=endpoint, status=410, code="CURSOR_EXPIRED"
    )


@dataclass(frozen=True, slots=True)
class Call:
    """One request: ``at`` is the cursor, or the window's start for a first records page."""

    endpoint: str  # from_now, changes, records_first or records_next
    at: str
    priority: Priority
    rank: float = 0.0  # within the priority, higher first (budget.py)


class FakePlatform:
    """The record side of a platform whose every answer the test decides.

    Records are served by creation time in pages of ``limit``; change pages are scripted by
    cursor (an unknown cursor answers an empty page: no backlog); ``fail(...)`` makes the
    next calls at one place raise.  Every page carries ``projection_as_of=now``.
    """

    def __init__(
        self,
        *,
        now: datetime = NOW,
        records: Iterable[Record] = (),
        journal: list[str] | None = None,
    ) -> None:
        self.now = now
        self.journal = [] if journal is None else journal  # endpoints called, in order
        self.records = sorted(records, key=lambda item: (item.created_at, item.record_id))
        self.change_pages: dict[str, ChangesPage] = {}
        self.anchors_without_time = 0  # how many anchor pages come without projection_as_of
        self.round_trip: float | None = None  # what pace() says was measured
        self.record_requests = 2  # per second, what pace() says capabilities.limits allows
        self.calls: list[Call] = []
        self._failures: dict[tuple[str, str], list[BaseException]] = {}
        self._anchors = 0
        self._chains: list[Window] = []
        self._lock = threading.Lock()

    def fail(self, endpoint: str, at: str, *errors: BaseException) -> None:
        """The next calls of ``endpoint`` at ``at`` raise ``errors``, one each, in order."""
        self._failures.setdefault((endpoint, at), []).extend(errors)

    def add_changes(
        self, cursor: str, records: Sequence[Record], *, next_cursor: str, has_more: bool
    ) -> None:
        changes = [make_change(item, 100 + number) for number, item in enumerate(records)]
        self.change_pages[cursor] = ChangesPage(
            changes=changes,
            rejected=[],
            next_cursor=next_cursor,
            has_more=has_more,
            projection_as_of=self.now,
            request_id=f"req-{cursor}",
        )

    def calls_to(self, *endpoints: str) -> list[Call]:
        with self._lock:
            return [call for call in self.calls if call.endpoint in endpoints]

    def _called(self, endpoint: str, at: str, priority: Priority, rank: float = 0.0) -> None:
        with self._lock:
            self.calls.append(Call(endpoint, at, priority, rank))
            # A sync that reads the same page for ever fails here, instead of hanging the test.
            assert len(self.calls) <= MAX_CALLS, f"more than {MAX_CALLS} requests"
            self.journal.append(endpoint)
            waiting = self._failures.get((endpoint, at))
            error = waiting.pop(0) if waiting else None
        if error is not None:
            raise error

    # -- RecordSource ------------------------------------------------------------------------

    def pace(self) -> Pace:
        """No round trip measured unless a test sets ``round_trip``: windows are not re-split."""
        return Pace(self.record_requests, 1.0, 0.05, self.round_trip)

    def changes(
        self,
        *,
        cursor: str | None = None,
        since: datetime | None = None,
        from_now: bool = False,
        limit: int = 1000,
        priority: Priority = Priority.TAIL,
    ) -> ChangesPage:
        assert since is None, "the sync never starts the change stream from a time"
        if from_now:
            self._called("from_now", "", priority)
            with self._lock:
                self._anchors += 1
                number = self._anchors
                timeless = self.anchors_without_time > 0
                if timeless:
                    self.anchors_without_time -= 1
            return ChangesPage(
                changes=[],
                rejected=[],
                next_cursor=f"anchor-{number}",
                has_more=False,
                projection_as_of=None if timeless else self.now,
                request_id=f"req-anchor-{number}",
            )
        assert cursor is not None
        self._called("changes", cursor, priority)
        idle = ChangesPage([], [], next_cursor=cursor, has_more=False, projection_as_of=self.now)
        return self.change_pages.get(cursor, idle)

    def records_first(
        self,
        created_from: datetime,
        created_to: datetime,
        *,
        limit: int,
        priority: Priority = Priority.SNAPSHOT,
        rank: float = 0.0,
    ) -> RecordsPage:
        self._called("records_first", created_from.isoformat(), priority, rank)
        with self._lock:
            self._chains.append(Window(created_from, created_to))
            chain = len(self._chains) - 1
        return self._page(chain, 0, limit)

    def records_next(
        self,
        cursor: str,
        *,
        limit: int,
        priority: Priority = Priority.SNAPSHOT,
        rank: float = 0.0,
    ) -> RecordsPage:
        self._called("records_next", cursor, priority, rank)
        chain, offset = cursor.split(":")
        return self._page(int(chain), int(offset), limit)

    def _page(self, chain: int, offset: int, limit: int) -> RecordsPage:
        window = self._chains[chain]
        inside = [item for item in self.records if window.start <= item.created_at < window.end]
        end = offset + limit
        return RecordsPage(
            records=inside[offset:end],
            rejected=[],
            next_cursor=f"{chain}:{end}" if end < len(inside) else None,
            has_more=end < len(inside),
            snapshot_watermark="wm",
            projection_as_of=self.now,
            request_id=f"req-{chain}-{offset}",
        )


@dataclass(frozen=True, slots=True)
class TailCommit:
    position: str
    next_cursor: str
    record_ids: list[str]


@dataclass
class FakeStore:
    """An in-memory warehouse for one merchant; ``fail(method, *errors)`` breaks the next calls.

    ``calls`` names the methods called, in order (pass the platform's journal to see both).
    """

    state: SyncState | None = None
    concurrent_writes: bool = False
    merchant_id: str = MERCHANT  # the merchant the store is bound to
    rows: dict[str, Record] = field(default_factory=dict)
    jobs: dict[str, dict[Window, WindowProgress]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    tail_commits: list[TailCommit] = field(default_factory=list)
    window_page_groups: list[int] = field(default_factory=list)  # pages per group commit
    drift_notes: list[bool] = field(default_factory=list)  # note_drift_check's ``deferred``
    # The BI indexes as the warehouse keeps them: left out by a new job into no rows at all.
    bi_indexes: bool = True
    deferrals: int = 0  # new jobs that left the BI indexes out
    _failures: dict[str, list[BaseException]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, method: str, *errors: BaseException) -> None:
        self._failures.setdefault(method, []).extend(errors)

    def keep(self, *records: Record) -> None:
        """Store rows as the warehouse does: the highest revision wins."""
        for item in records:
            held = self.rows.get(item.record_id)
            if held is None or held.revision < item.revision:
                self.rows[item.record_id] = item

    def windows(self, job: str) -> list[WindowProgress]:
        return sorted(self.jobs.get(job, {}).values(), key=lambda item: item.window.start)

    def _called(self, method: str) -> None:
        self.calls.append(method)
        waiting = self._failures.get(method)
        if waiting:
            raise waiting.pop(0)

    # -- SyncStore ----------------------------------------------------------------------------

    def load_state(self) -> SyncState | None:
        with self._lock:
            self._called("load_state")
            return self.state

    def load_windows(self, job: str) -> list[WindowProgress]:
        with self._lock:
            self._called("load_windows")
            return self.windows(job)

    def start_rebuild(
        self,
        *,
        change_cursor: str,
        anchor_at: datetime,
        history_from: datetime,
        snapshot_to: datetime,
        windows: Sequence[Window],
        defer_bi_indexes: bool = False,
    ) -> SyncState:
        with self._lock:
            self._called("start_rebuild")
            self.state = SyncState(
                merchant_id=self.merchant_id,
                phase=Phase.SNAPSHOT if windows else Phase.TAILING,
                change_cursor=change_cursor,
                anchor_at=anchor_at,
                history_from=history_from,
                snapshot_to=snapshot_to,
                rebuilds=0 if self.state is None else self.state.rebuilds + 1,
                last_sequence=None,
                last_projection_as_of=None,
                last_commit_at=None,
            )
            self.jobs[REBUILD_JOB] = _progress(self.merchant_id, REBUILD_JOB, windows)
            if defer_bi_indexes:
                self._defer_bi_indexes(windows)
            return self.state

    def ensure_job(
        self,
        job: str,
        windows: Sequence[Window],
        *,
        defer_bi_indexes: bool = False,
    ) -> list[WindowProgress]:
        with self._lock:
            self._called("ensure_job")
            if job not in self.jobs:
                self.jobs[job] = _progress(self.merchant_id, job, windows)
                if defer_bi_indexes:
                    self._defer_bi_indexes(windows)
            return self.windows(job)

    def _defer_bi_indexes(self, windows: Sequence[Window]) -> None:
        if windows and not self.rows:
            self.bi_indexes = False
            self.deferrals += 1

    def missing_bi_indexes(self) -> list[str]:
        with self._lock:
            self._called("missing_bi_indexes")
            return [] if self.bi_indexes else ["ix_records_merchant_created"]

    def build_bi_indexes(self) -> None:
        with self._lock:
            self._called("build_bi_indexes")
            self.bi_indexes = True

    def commit_window_pages(self, pages: Sequence[WindowPage]) -> list[None]:
        """Every page with its window's cursor, all or nothing (checked before any is kept)."""
        with self._lock:
            self._called("commit_window_pages")
            self.window_page_groups.append(len(pages))
            for page in pages:
                self._keep_window_page(page)
            return [None] * len(pages)

    def commit_window_page(
        self,
        job: str,
        window: Window,
        *,
        records: Sequence[Record],
        rejected: Sequence[RejectedItem],
        next_cursor: str | None,
        cursor_issued_at: datetime | None,
        done: bool,
        position: str,
    ) -> None:
        with self._lock:
            self._called("commit_window_page")
            self._keep_window_page(
                WindowPage(job, window, records, (), next_cursor, cursor_issued_at, done, "")
            )

    def _keep_window_page(self, page: WindowPage) -> None:
        self.keep(*page.records)
        held = self.jobs[page.job][page.window]
        self.jobs[page.job][page.window] = replace(
            held,
            cursor=page.next_cursor,
            cursor_issued_at=page.cursor_issued_at,
            done=page.done,
            records=held.records + len(page.records),
        )
        finished = all(item.done for item in self.jobs[page.job].values())
        if page.job == REBUILD_JOB and finished and self.state is not None:
            self.state = replace(self.state, phase=Phase.TAILING)

    def restart_window(self, job: str, window: Window) -> None:
        with self._lock:
            self._called("restart_window")
            held = self.jobs[job][window]
            self.jobs[job][window] = replace(held, cursor=None, cursor_issued_at=None, records=0)

    def split_window(self, job: str, window: Window, pieces: Sequence[Window]) -> None:
        with self._lock:
            self._called("split_window")
            windows = self.jobs[job]
            held = windows.pop(window)
            assert pieces[-1].end == window.end
            cut = Window(window.start, pieces[0].start)
            windows[cut] = replace(held, window=cut, cursor=None, cursor_issued_at=None, done=True)
            windows.update(_progress(self.merchant_id, job, pieces))

    def carry_window(self, job: str, window: Window, following: Window, joined: Window) -> None:
        with self._lock:
            self._called("carry_window")
            windows = self.jobs[job]
            held = windows.pop(window)
            unread = windows.pop(following)
            assert unread.cursor is None
            assert not unread.done
            assert unread.records == 0
            assert window.start < joined.start < window.end == following.start
            assert joined.end == following.end
            cut = Window(window.start, joined.start)
            windows[cut] = replace(held, window=cut, cursor=None, cursor_issued_at=None, done=True)
            windows.update(_progress(self.merchant_id, job, [joined]))

    def commit_tail_page(self, page: TailPage) -> None:
        with self._lock:
            self._called("commit_tail_page")
            assert self.state is not None, "no sync state: start a rebuild"
            self.keep(*page.records)
            self.state = replace(
                self.state,
                change_cursor=page.next_cursor,
                last_sequence=page.last_sequence or self.state.last_sequence,
                last_projection_as_of=page.projection_as_of or self.state.last_projection_as_of,
            )
            ids = [item.record_id for item in page.records]
            self.tail_commits.append(TailCommit(page.position, page.next_cursor, ids))

    def stored_revisions(self, record_ids: Collection[str]) -> dict[str, int]:
        with self._lock:
            self._called("stored_revisions")
            return {key: self.rows[key].revision for key in record_ids if key in self.rows}

    def note_drift_check(self, *, deferred: bool) -> None:
        with self._lock:
            self._called("note_drift_check")
            self.drift_notes.append(deferred)

    def maintain_summaries(self) -> None:
        """The summaries live in the database's triggers: nothing to keep here."""

    def prune_revisions(self, after: RevisionKey | None, retention: timedelta) -> PrunedBatch:
        """No revision history here: a sweep finds nothing and ends at once."""
        with self._lock:
            self._called("prune_revisions")
        return PrunedBatch(last=None, scanned=0, deleted=0)


def _progress(
    merchant_id: str, job: str, windows: Sequence[Window]
) -> dict[Window, WindowProgress]:
    return {
        window: WindowProgress(merchant_id, job, window, None, None, done=False, records=0)
        for window in windows
    }


def tailing_state(**changes: object) -> SyncState:
    """A merchant whose snapshot is done, with the tail at ``saved-cursor``."""
    state = SyncState(
        merchant_id=MERCHANT,
        phase=Phase.TAILING,
        change_cursor="saved-cursor",
        anchor_at=NOW - 2 * HOUR,
        history_from=NOW - 30 * HOUR,
        snapshot_to=NOW - 2 * HOUR,
        rebuilds=0,
        last_sequence="99",
        last_projection_as_of=NOW,
        last_commit_at=None,
    )
    return replace(state, **changes)  # type: ignore[arg-type]


class InstantStopper(Stopper):
    """A stopper whose sleeps return at once (a stop still raises), each one recorded, so a
    failed step's backoff is seen without being waited for.  After ``max_sleeps`` it stops:
    a test that would retry forever fails instead of hanging."""

    def __init__(self, max_sleeps: int = 20) -> None:
        super().__init__()
        self.slept: list[float] = []
        self.max_sleeps = max_sleeps

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if len(self.slept) >= self.max_sleeps:
            self.stop()
        if self.stopped:
            raise ShutdownRequestedError("stop requested")


class RecordingObserver(SyncObserver):
    """What the engine reported, in order."""

    def __init__(self) -> None:
        self.phases: list[str] = []
        self.errors: list[str] = []
        self.rebuilds: list[str] = []
        self.drift: list[tuple[Window, int]] = []

    def phase_changed(self, phase: str) -> None:
        self.phases.append(phase)

    def error(self, kind: str) -> None:
        self.errors.append(kind)

    def rebuild_started(self, reason: str) -> None:
        self.rebuilds.append(reason)

    def drift_checked(self, window: Window, rows_behind: int) -> None:
        self.drift.append((window, rows_behind))


def make_engine(
    platform: RecordSource,
    store: SyncStore,
    *,
    stopper: Stopper | None = None,
    observer: SyncObserver | None = None,
    **changes: object,
) -> SyncEngine:
    """An engine on the fakes with ``options(**changes)``."""
    return SyncEngine(
        client=platform,
        warehouse=store,
        options=options(**changes),
        stopper=stopper or Stopper(),
        observer=observer,
    )


def make_context(
    platform: RecordSource,
    store: SyncStore,
    *,
    stopper: Stopper | None = None,
    observer: SyncObserver | None = None,
    **changes: object,
) -> SyncContext:
    """What such an engine hands its parts, to drive one part alone."""
    return make_engine(platform, store, stopper=stopper, observer=observer, **changes)._context
