"""The metric adapters: what the platform client and the sync report, counted in ``Metrics``.

The client and the engine only know their observer interfaces (``ClientObserver``,
``SyncObserver``); ``recordsync.metrics`` knows no layer at all.  The service, which builds
all three, joins them here: one pair of observers per merchant, each given that merchant's
view (``Metrics.merchant(merchant_id)``), so every series they feed carries its
``merchant_id`` and two merchants' figures never mix.
"""

from __future__ import annotations

from datetime import datetime

from recordsync.core.state import Window
from recordsync.metrics.merchant import MerchantMetrics
from recordsync.sync.events import SyncObserver


class ClientMetricsObserver:
    """``recordsync.platform.client.ClientObserver``: never raises, label values are bounded."""

    def __init__(self, metrics: MerchantMetrics) -> None:
        self._metrics = metrics

    def on_response(
        self,
        endpoint: str,
        status: int | None,
        code: str | None,
        seconds: float,
        request_id: str | None,
    ) -> None:
        self._metrics.request_done(endpoint, status, code, seconds)

    def on_retry(self, endpoint: str, reason: str, delay: float) -> None:
        self._metrics.request_retried(endpoint, reason)

    def on_rate_limited(self, endpoint: str, retry_after: float) -> None:
        self._metrics.rate_limited(endpoint)


class SyncMetricsObserver(SyncObserver):
    """The engine's events as metrics; every committed page goes through ``page_committed``."""

    def __init__(self, metrics: MerchantMetrics) -> None:
        self._metrics = metrics

    def windows_planned(self, job: str, total: int, done: int) -> None:
        self._metrics.windows_planned(job, total, done)

    def window_page(self, job: str, window: Window, records: int, *, done: bool) -> None:
        self._metrics.page_committed(job, records)
        if done:
            self._metrics.window_done(job)

    def tail_page(
        self,
        changes: int,
        *,
        has_more: bool,
        projection_as_of: datetime | None,
        last_sequence: str | None,
    ) -> None:
        self._metrics.page_committed("tail", changes)
        self._metrics.changes_applied(changes)
        self._metrics.tail_position(
            has_more=has_more, projection_as_of=projection_as_of, last_sequence=last_sequence
        )

    def tail_polled(self, *, has_more: bool, projection_as_of: datetime | None) -> None:
        self._metrics.tail_position(
            has_more=has_more, projection_as_of=projection_as_of, last_sequence=None
        )

    def tail_interval(self, seconds: float) -> None:
        self._metrics.tail_wait(seconds)

    def quarantined(self, source: str, count: int) -> None:
        self._metrics.quarantined(source, count)

    def unknown_fields(self, rows: dict[str, int]) -> None:
        self._metrics.unknown_fields(rows)

    def page_written(self, source: str, seconds: float) -> None:
        self._metrics.observe_write(seconds)

    def drift_checked(self, window: Window, rows_behind: int) -> None:
        self._metrics.drift_checked(rows_behind)

    def drift_check_scheduled(self, interval: float) -> None:
        self._metrics.drift_check_scheduled(interval)

    def drift_check_ran(self) -> None:
        self._metrics.drift_check_ran()

    def drift_check_deferred(self, reason: str) -> None:
        self._metrics.drift_check_deferred()

    def revisions_pruned(self, count: int) -> None:
        self._metrics.revisions_pruned(count)

    def catalogue_refreshed(self, games: int, seconds: float) -> None:
        self._metrics.catalogue_refreshed()

    def catalogue_available(self, *, available: bool) -> None:
        self._metrics.catalogue_available(available=available)

    def rebuild_started(self, reason: str) -> None:
        self._metrics.rebuild_started()

    def error(self, kind: str) -> None:
        self._metrics.error(kind)
