"""What the sync reports as it goes, for progress displays and metrics.

The engine calls a ``SyncObserver``; it never knows whether a progress bar, a metrics
registry or nothing at all is listening.  Every method has a no-op default, so an observer
implements only what it shows.
"""

from __future__ import annotations

from datetime import datetime

from recordsync.core.state import Window


class SyncObserver:
    """No-op base; subclass and override what you need. Calls come from worker threads."""

    def windows_planned(self, job: str, total: int, done: int) -> None:
        """A job's windows are known (``done`` of ``total`` already finished)."""

    def window_page(self, job: str, window: Window, records: int, *, done: bool) -> None:
        """A snapshot page was committed."""

    def tail_page(
        self,
        changes: int,
        *,
        has_more: bool,
        projection_as_of: datetime | None,
        last_sequence: str | None,
    ) -> None:
        """A page of changes was committed with its cursor."""

    def tail_polled(self, *, has_more: bool, projection_as_of: datetime | None) -> None:
        """An empty change page left the cursor where it was: nothing to commit, but the
        warehouse is now known to hold every change up to ``projection_as_of``."""

    def tail_interval(self, seconds: float) -> None:
        """The tail will wait ``seconds`` before its next read (``tail_pace``)."""

    def quarantined(self, source: str, count: int) -> None:
        """Items failed validation and were stored in the quarantine."""

    def unknown_fields(self, rows: dict[str, int]) -> None:
        """Committed rows carried members recordsync does not know: rows per member name."""

    def page_written(self, source: str, seconds: float) -> None:
        """One page's warehouse transaction took ``seconds`` (rows, quarantine and cursor)."""

    def drift_checked(self, window: Window, rows_behind: int) -> None:
        """A drift check over ``window`` finished; ``rows_behind`` > 0 is an alert."""

    def drift_check_scheduled(self, interval: float) -> None:
        """The drift check runs every ``interval`` seconds from now on."""

    def drift_check_ran(self) -> None:
        """A drift check run ended (compared, or nothing to compare before the snapshot)."""

    def revisions_pruned(self, count: int) -> None:
        """``count`` superseded revisions past the retention were deleted."""

    def drift_check_deferred(self, reason: str) -> None:
        """A drift check run gave its thread back, to run again later (``reason``: why)."""

    def catalogue_refreshed(self, games: int, seconds: float) -> None:
        """A catalogue pass of ``games`` games was committed, ``seconds`` after it began."""

    def catalogue_available(self, *, available: bool) -> None:
        """Whether the platform serves the catalogue to this merchant (each pass says)."""

    def phase_changed(self, phase: str) -> None:
        """The sync entered ``phase`` (standby, anchoring, snapshot, tailing, rebuilding,
        backfill)."""

    def rebuild_started(self, reason: str) -> None:
        """The change cursor expired: a new anchor and a new snapshot."""

    def error(self, kind: str) -> None:
        """A step failed and will be tried again (``kind`` is the exception class name)."""

    def rounds_checked(self, missing: int) -> None:
        """The cross-check of round-end notifications found ``missing`` rounds announced
        longer ago than the grace and still not in the warehouse (> 0 is an alert)."""


class MultiObserver(SyncObserver):
    """Fans every call out to several observers (a progress bar and metrics, say)."""

    def __init__(self, *observers: SyncObserver) -> None:
        self.observers = observers

    def windows_planned(self, job: str, total: int, done: int) -> None:
        for observer in self.observers:
            observer.windows_planned(job, total, done)

    def window_page(self, job: str, window: Window, records: int, *, done: bool) -> None:
        for observer in self.observers:
            observer.window_page(job, window, records, done=done)

    def tail_page(
        self,
        changes: int,
        *,
        has_more: bool,
        projection_as_of: datetime | None,
        last_sequence: str | None,
    ) -> None:
        for observer in self.observers:
            observer.tail_page(
                changes,
                has_more=has_more,
                projection_as_of=projection_as_of,
                last_sequence=last_sequence,
            )

    def tail_polled(self, *, has_more: bool, projection_as_of: datetime | None) -> None:
        for observer in self.observers:
            observer.tail_polled(has_more=has_more, projection_as_of=projection_as_of)

    def tail_interval(self, seconds: float) -> None:
        for observer in self.observers:
            observer.tail_interval(seconds)

    def quarantined(self, source: str, count: int) -> None:
        for observer in self.observers:
            observer.quarantined(source, count)

    def unknown_fields(self, rows: dict[str, int]) -> None:
        for observer in self.observers:
            observer.unknown_fields(rows)

    def page_written(self, source: str, seconds: float) -> None:
        for observer in self.observers:
            observer.page_written(source, seconds)

    def drift_checked(self, window: Window, rows_behind: int) -> None:
        for observer in self.observers:
            observer.drift_checked(window, rows_behind)

    def drift_check_scheduled(self, interval: float) -> None:
        for observer in self.observers:
            observer.drift_check_scheduled(interval)

    def drift_check_ran(self) -> None:
        for observer in self.observers:
            observer.drift_check_ran()

    def revisions_pruned(self, count: int) -> None:
        for observer in self.observers:
            observer.revisions_pruned(count)

    def drift_check_deferred(self, reason: str) -> None:
        for observer in self.observers:
            observer.drift_check_deferred(reason)

    def catalogue_refreshed(self, games: int, seconds: float) -> None:
        for observer in self.observers:
            observer.catalogue_refreshed(games, seconds)

    def catalogue_available(self, *, available: bool) -> None:
        for observer in self.observers:
            observer.catalogue_available(available=available)

    def phase_changed(self, phase: str) -> None:
        for observer in self.observers:
            observer.phase_changed(phase)

    def rebuild_started(self, reason: str) -> None:
        for observer in self.observers:
            observer.rebuild_started(reason)

    def error(self, kind: str) -> None:
        for observer in self.observers:
            observer.error(kind)

    def rounds_checked(self, missing: int) -> None:
        for observer in self.observers:
            observer.rounds_checked(missing)
