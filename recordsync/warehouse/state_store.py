"""The sync state store: where each merchant's sync stands (``sync_state``: the change cursor,
the phase, the jobs' snapshot windows) and when its drift check ran (``drift_checks``), each
call one transaction of its own, every write fenced (``fencing``).

A page's cursor moves with the page, in the page store's transaction (``pages.store``); what
is here moves cursors on their own: a (re)build anchored, a job registered, a window
restarted, split or carried into the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from sqlalchemy import Engine

from recordsync.core.state import REBUILD_JOB, SyncState, Window, WindowProgress
from recordsync.warehouse import drift_checks, sync_state
from recordsync.warehouse.connection import side_by_side_writer, translate_errors
from recordsync.warehouse.fencing import fenced_write
from recordsync.warehouse.values import DriftCheckRun


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _keep_indexes(merchant_id: str, job: str) -> None:
    """Without a BI store, a new job keeps the BI indexes."""


class StateStore:
    """``clock`` stamps ``updated_at`` only: bookkeeping, never a sync boundary.
    ``defer_bi_indexes(merchant_id, job)`` is asked, after a new job into an empty
    ``records`` was registered, to leave the BI indexes out (``bi.store``)."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], datetime] = _utc_now,
        defer_bi_indexes: Callable[[str, str], None] = _keep_indexes,
    ) -> None:
        self._engine = engine
        self._writer = side_by_side_writer(engine)  # merchants side by side
        self._clock = clock
        self._defer_bi_indexes = defer_bi_indexes

    def load_state(self, merchant_id: str) -> SyncState | None:
        with translate_errors("load state"), self._engine.begin() as conn:
            return sync_state.load_state(conn, merchant_id)

    def load_windows(self, merchant_id: str, job: str) -> list[WindowProgress]:
        """The job's windows ordered by start."""
        with translate_errors("load windows"), self._engine.begin() as conn:
            return sync_state.load_windows(conn, merchant_id, job)

    def start_rebuild(
        self,
        merchant_id: str,
        *,
        change_cursor: str,
        anchor_at: datetime,
        history_from: datetime,
        snapshot_to: datetime,
        windows: Sequence[Window],
        defer_bi_indexes: bool = False,
        epoch: int | None = None,
    ) -> SyncState:
        """Anchor a (re)build: new tail cursor and a fresh set of rebuild windows, atomically.

        Spec, Records endpoints, "Rebuild without gaps": the anchor cursor is saved before the
        history is read.  Stored rows are kept: the rebuild's snapshot and tail overwrite them
        only with higher revisions.  ``last_sequence`` and ``last_projection_as_of`` are
        cleared because they described the old change cursor.  ``defer_bi_indexes``: leave
        the BI indexes out if ``records`` is empty (the sync decides, ``sync.indexes``).
        """
        sync_state.check_windows(windows)
        now = self._clock()
        with fenced_write(self._writer, "start rebuild", merchant_id, epoch) as conn:
            state = sync_state.start_rebuild(
                conn,
                merchant_id,
                change_cursor=change_cursor,
                anchor_at=anchor_at,
                history_from=history_from,
                snapshot_to=snapshot_to,
                windows=windows,
                now=now,
            )
        if windows and defer_bi_indexes:
            self._defer_bi_indexes(merchant_id, REBUILD_JOB)
        return state

    def ensure_job(
        self,
        merchant_id: str,
        job: str,
        windows: Sequence[Window],
        *,
        defer_bi_indexes: bool = False,
        epoch: int | None = None,
    ) -> list[WindowProgress]:
        """Register a one-shot backfill's windows once; later calls return its progress.

        Never touches ``sync_state``: a backfill runs beside the tail, not instead of it.  A
        new job into an empty ``records`` with ``defer_bi_indexes`` leaves the BI indexes out
        until it ends (as does ``start_rebuild``; ``BIStore.build_bi_indexes`` says why).
        """
        if job == REBUILD_JOB:
            raise ValueError("the rebuild job's windows are set by start_rebuild()")
        sync_state.check_windows(windows)
        with fenced_write(self._writer, "ensure job", merchant_id, epoch) as conn:
            progress, created = sync_state.ensure_job(
                conn, merchant_id, job, windows, now=self._clock()
            )
        if created and defer_bi_indexes:
            self._defer_bi_indexes(merchant_id, job)
        return progress

    def restart_window(
        self, merchant_id: str, job: str, window: Window, *, epoch: int | None = None
    ) -> None:
        """Forget a window's cursor after 410 CURSOR_EXPIRED, so its chain starts over.

        Its record count restarts too: the new chain reads the window from its beginning.
        Rows already stored stay; the new chain rewrites them only with higher revisions.
        """
        with fenced_write(self._writer, "restart window", merchant_id, epoch) as conn:
            sync_state.restart_window(conn, merchant_id, job, window, now=self._clock())

    def split_window(
        self,
        merchant_id: str,
        job: str,
        window: Window,
        pieces: Sequence[Window],
        *,
        epoch: int | None = None,
    ) -> None:
        """End a window where ``pieces`` begin and add them, in one transaction: its chain
        read everything before the first piece, each piece gets a chain of its own."""
        with fenced_write(self._writer, "split window", merchant_id, epoch) as conn:
            sync_state.split_window(conn, merchant_id, job, window, pieces, now=self._clock())

    def carry_window(
        self,
        merchant_id: str,
        job: str,
        window: Window,
        following: Window,
        joined: Window,
        *,
        epoch: int | None = None,
    ) -> None:
        """End a window where ``joined`` begins and put ``joined`` in place of the unread
        window after it, in one transaction: one chain reads the rest of both."""
        with fenced_write(self._writer, "carry window", merchant_id, epoch) as conn:
            sync_state.carry_window(
                conn,
                merchant_id,
                job,
                window,
                following=following,
                joined=joined,
                now=self._clock(),
            )

    # -- the drift check (drift_checks) ---------------------------------------------------------

    def note_drift_check(self, merchant_id: str, *, deferred: bool, epoch: int | None) -> None:
        """The merchant's drift check ran, or began to wait (``drift_checks``)."""
        with fenced_write(self._writer, "note drift check", merchant_id, epoch) as conn:
            drift_checks.note(conn, merchant_id, deferred=deferred)

    def drift_check_run(self, merchant_id: str) -> DriftCheckRun | None:
        """When the merchant's drift check last ran and since when it waits; None: never."""
        with translate_errors("read drift checks"), self._engine.begin() as conn:
            return drift_checks.last_run(conn, merchant_id)
