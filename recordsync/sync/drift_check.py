"""The drift check job: the last closed day read again from the platform at the lowest
budget priority and compared with the warehouse (what counts as drift is in ``drift``).

It runs as a periodic job of the daemon, every ``drift_interval`` seconds, and compares
nothing until the snapshot is done.  A check deferred by a failure (``core.waiting``) goes on
from the page it failed on when it runs again, its tally kept.

Its starvation bound is seen, not hoped for: every run that ends (a comparison, or nothing to
compare yet) and every deferral is reported to the observer, so the metrics show how long
since it last ran and how often it gave its periodic thread back behind the sync's own reads
(the rate budget serves background work last, ``platform.budget``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from recordsync.core.errors import RecordSyncError
from recordsync.core.state import Phase, Window
from recordsync.core.waiting import Deferred
from recordsync.platform.budget import Priority
from recordsync.sync.context import SyncContext
from recordsync.sync.drift import DriftTally, last_closed_day
from recordsync.sync.resilience import StepRunner


@dataclass(slots=True)
class _Check:
    """A check under way: its day, the next page's cursor, what it counted so far."""

    window: Window
    cursor: str | None = None
    tally: DriftTally = field(default_factory=DriftTally)


class DriftCheck:
    """One merchant's drift check.  ``runner`` is the job's own: an outage of the platform
    or the warehouse while the check runs is waited out (or deferred) like one during a page
    commit, never an exception that ends the daemon."""

    def __init__(self, ctx: SyncContext, runner: StepRunner) -> None:
        self._ctx = ctx
        self._runner = runner
        self._check: _Check | None = None
        self._waiting = False  # a deferral of the current run noted

    def run(self) -> None:
        """Re-read the last closed day at the lowest priority; count rows behind the
        platform.  A deferral is reported, then left to the job runner to schedule again;
        the first of a run's deferrals and the run's end are noted in the warehouse, for
        ``status`` to say why a check is overdue."""
        try:
            self._run()
        except Deferred as later:
            self._ctx.observer.drift_check_deferred(later.reason)
            if not self._waiting:
                self._waiting = self._note(deferred=True)
            raise
        self._ctx.observer.drift_check_ran()
        self._note(deferred=False)
        self._waiting = False

    def _note(self, *, deferred: bool) -> bool:
        """Bookkeeping: never what fails or delays the check (True once noted)."""
        try:
            self._ctx.warehouse.note_drift_check(deferred=deferred)
        except RecordSyncError as exc:
            self._ctx.log.debug("drift_check_note_failed", error_type=type(exc).__name__)
            return False
        return True

    def _run(self) -> None:
        ctx, runner = self._ctx, self._runner
        check = self._check
        if check is None:
            state = runner.run(ctx.warehouse.load_state, what="drift check")
            if state is None or state.phase is not Phase.TAILING:
                return  # the snapshot is still filling the warehouse: nothing to compare yet
            platform_now = state.last_projection_as_of or state.anchor_at
            check = self._check = _Check(last_closed_day(platform_now))
        window = check.window
        while True:
            page = runner.run(
                lambda at=check.cursor: ctx.records_page(  # type: ignore[misc]
                    window.start, window.end, at, Priority.BACKGROUND
                ),
                what="drift check",
            )
            ids = [record.record_id for record in page.records]

            def compare(ids: list[str] = ids) -> tuple[dict[str, int], datetime | None]:
                stored = ctx.warehouse.stored_revisions(ids)
                current = ctx.warehouse.load_state()
                return stored, current.last_projection_as_of if current else None

            stored, covered_until = runner.run(compare, what="drift check")
            check.tally.add(page.records, stored, covered_until=covered_until)
            if not page.has_more:
                break
            check.cursor = page.next_cursor
        self._check = None
        self._report(window, check.tally)

    def _report(self, window: Window, tally: DriftTally) -> None:
        ctx = self._ctx
        ctx.observer.drift_checked(window, tally.rows_behind)
        fields = {
            "window_start": window.start.isoformat(),
            "checked": tally.checked,
            "behind": tally.behind,
            "missing": tally.missing,
            "still_arriving": tally.ignored_recent,
        }
        if tally.rows_behind:
            ctx.log.error("drift_found", action="alert: investigate; nothing was changed", **fields)
        else:
            ctx.log.info("drift_checked", **fields)
