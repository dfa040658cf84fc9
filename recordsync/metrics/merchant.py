"""One merchant's series: the counters and histograms labelled ``merchant_id``, and the view
that its client and sync observers feed (``MerchantMetrics``).

A view writes its counters and histograms at once and puts what its gauges show into the book
(``recordsync.metrics.book``), which a scrape reads.  The layers never call a view themselves:
they report through the adapters the service builds (``service.daemon.observers``: the
platform client's ``ClientObserver`` and the engine's ``SyncObserver``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from recordsync.metrics.book import Book, JobProgress
from recordsync.metrics.names import MERCHANT_LABEL, NONE_LABEL, MetricName


class WriteOutcome(StrEnum):
    """``outcome`` label of ``recordsync_records_written_total``.

    ``WRITTEN`` is used while the warehouse reports only how many rows it sent to the upsert;
    once it reports the split, callers pass inserted/updated/skipped instead.
    """

    INSERTED = "inserted"
    UPDATED = "updated"
    SKIPPED = "skipped"  # not newer than the stored revision
    WRITTEN = "written"


# At most this many ``field`` labels per merchant on the unknown-fields counter; the others
# count under ``OTHER_FIELDS_LABEL`` (the names come from the platform, not the configuration).
MAX_UNKNOWN_FIELDS: Final = 50
OTHER_FIELDS_LABEL: Final = "_other"

# Platform latency: a page of 1000 records is usually well under a second; the client's
# timeout is 30 s.
REQUEST_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# One transaction of up to 1000 upserted rows plus a cursor.
WRITE_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def job_kind(job: str) -> str:
    """A bounded label value for a job or source: ``tail``, ``rebuild`` or ``backfill``.

    A backfill job is named ``backfill:<from>/<to>`` (``recordsync.core.state.backfill_job``); the
    range would make an unbounded label, so only the kind is kept.
    """
    return job.split(":", 1)[0]


def sequence_as_float(sequence: str) -> float:
    """A change ``sequence`` (a decimal string of any length, spec: Record change) as a float.

    Precision is lost beyond 2**53 and huge values become ``inf``: the gauge shows progress
    (is it moving, how fast), never an exact position.  The exact one is in the sync state.
    """
    return float(sequence)


@dataclass(frozen=True, slots=True)
class Instruments:
    """The counters and histograms, every one labelled ``merchant_id`` first."""

    platform_requests: Counter
    platform_request_duration: Histogram
    platform_retries: Counter
    platform_rate_limited: Counter
    records_written: Counter
    changes_applied: Counter
    pages_committed: Counter
    records_quarantined: Counter
    warehouse_write_duration: Histogram
    rebuilds: Counter
    errors: Counter
    drift_checks: Counter
    drift_deferrals: Counter
    revisions_pruned: Counter
    sync_failures: Counter
    catalogue_refreshes: Counter
    record_fields_unknown: Counter

    @classmethod
    def register(cls, reg: CollectorRegistry) -> Instruments:
        """Every instrument in ``reg``, with ``merchant_id`` as the first label of each."""

        def counter(name: MetricName, documentation: str, *labels: str) -> Counter:
            return Counter(name, documentation, [MERCHANT_LABEL, *labels], registry=reg)

        def histogram(
            name: MetricName, documentation: str, buckets: tuple[float, ...], *labels: str
        ) -> Histogram:
            return Histogram(
                name, documentation, [MERCHANT_LABEL, *labels], buckets=buckets, registry=reg
            )

        return cls(
            platform_requests=counter(
                MetricName.PLATFORM_REQUESTS,
                "Platform API requests by endpoint, HTTP status and error.code (none: no answer).",
                "endpoint",
                "status",
                "code",
            ),
            platform_request_duration=histogram(
                MetricName.PLATFORM_REQUEST_DURATION,
                "Duration of one platform request attempt, retries counted separately.",
                REQUEST_BUCKETS,
                "endpoint",
            ),
            platform_retries=counter(
                MetricName.PLATFORM_RETRIES,
                "Platform requests sent again, by endpoint and reason.",
                "endpoint",
                "reason",
            ),
            platform_rate_limited=counter(
                MetricName.PLATFORM_RATE_LIMITED,
                "429 RATE_LIMITED answers received; each pauses the merchant's rate budget.",
                "endpoint",
            ),
            records_written=counter(
                MetricName.RECORDS_WRITTEN,
                "Records committed to the warehouse, by outcome.",
                "outcome",
            ),
            changes_applied=counter(
                MetricName.CHANGES_APPLIED,
                "Changes from record-changes committed with their cursor.",
            ),
            pages_committed=counter(
                MetricName.PAGES_COMMITTED,
                "Pages committed with their cursor, by source (tail, rebuild, backfill).",
                "source",
            ),
            records_quarantined=counter(
                MetricName.RECORDS_QUARANTINED,
                "Items that failed validation and were stored in the quarantine, by source.",
                "source",
            ),
            warehouse_write_duration=histogram(
                MetricName.WAREHOUSE_WRITE_DURATION,
                "Duration of one page's warehouse transaction (rows, quarantine and cursor).",
                WRITE_BUCKETS,
            ),
            rebuilds=counter(
                MetricName.REBUILDS,
                "Rebuilds started because the change cursor expired (new anchor and snapshot).",
            ),
            errors=counter(
                MetricName.ERRORS,
                "Failed sync steps that will be tried again, by exception class.",
                "kind",
            ),
            drift_checks=counter(
                MetricName.DRIFT_CHECKS,
                "Drift checks completed (a closed 24 h window re-read and compared).",
            ),
            drift_deferrals=counter(
                MetricName.DRIFT_CHECK_DEFERRALS,
                "Drift check runs that gave their periodic thread back and were scheduled "
                "again (the rate budget taken by the sync's own reads, a pause, an outage).",
            ),
            revisions_pruned=counter(
                MetricName.REVISIONS_PRUNED,
                "Superseded revisions deleted from record_revisions after "
                "RECORDSYNC_REVISION_RETENTION days (the current revision is always kept).",
            ),
            sync_failures=counter(
                MetricName.SYNC_FAILURES,
                "Merchant syncs ended by an unexpected error (a bug) and restarted after a "
                "backoff, by exception class.",
                "kind",
            ),
            catalogue_refreshes=counter(
                MetricName.CATALOGUE_REFRESHES,
                "Game catalogue passes committed (every page read, stored in one transaction).",
            ),
            record_fields_unknown=counter(
                MetricName.RECORD_FIELDS_UNKNOWN,
                "Committed rows that carried a record member recordsync does not know (kept "
                "in extra_fields), by member name; names past the first "
                f"{MAX_UNKNOWN_FIELDS} of a merchant count as {OTHER_FIELDS_LABEL!r}.",
                "field",
            ),
        )


class MerchantMetrics:
    """One merchant's series: what that merchant's client and sync observers report.

    Get it from ``Metrics.merchant``.  A view holds nothing of its own, so it stays valid
    across ``Metrics.forget_merchant``: a report made after it brings the merchant's series
    back (as they should when the merchant's lease returns to this process).  Thread-safe.
    """

    def __init__(self, merchant_id: str, instruments: Instruments, book: Book) -> None:
        self.merchant_id = merchant_id
        self._series = instruments
        self._book = book
        # The series with no other label exist from now on, at 0, so that rate() and
        # increase() see the merchant's first rebuild or drift check as an increase.
        for counter in (
            instruments.changes_applied,
            instruments.rebuilds,
            instruments.drift_checks,
            instruments.drift_deferrals,
            instruments.revisions_pruned,
            instruments.catalogue_refreshes,
        ):
            counter.labels(merchant_id)
        instruments.warehouse_write_duration.labels(merchant_id)

    # -- the platform client ----------------------------------------------------------------

    def request_done(
        self, endpoint: str, status: int | None, code: str | None, seconds: float
    ) -> None:
        """One attempt ended: ``status`` None when no answer came, ``code`` the error.code."""
        self._series.platform_requests.labels(
            self.merchant_id,
            endpoint,
            NONE_LABEL if status is None else str(status),
            code or NONE_LABEL,
        ).inc()
        self._series.platform_request_duration.labels(self.merchant_id, endpoint).observe(seconds)

    def request_retried(self, endpoint: str, reason: str) -> None:
        self._series.platform_retries.labels(self.merchant_id, endpoint, reason).inc()

    def rate_limited(self, endpoint: str) -> None:
        """A 429 RATE_LIMITED answer (spec: Limits): the merchant's budget pauses."""
        self._series.platform_rate_limited.labels(self.merchant_id, endpoint).inc()

    # -- pages and the warehouse ------------------------------------------------------------

    def page_committed(
        self,
        source: str,
        records: int,
        seconds: float | None = None,
        *,
        outcomes: Mapping[WriteOutcome, int] | None = None,
    ) -> None:
        """One page and its cursor were committed.

        ``source`` is ``tail`` or a job name; ``seconds`` the transaction's duration when the
        caller timed it; ``outcomes`` the inserted/updated/skipped split when known, else the
        ``records`` count as ``written``.  The sync observer calls this for every page the
        engine commits: do not call it again for those pages.
        """
        self._series.pages_committed.labels(self.merchant_id, job_kind(source)).inc()
        split = outcomes if outcomes is not None else {WriteOutcome.WRITTEN: records}
        for outcome, count in split.items():
            self._series.records_written.labels(self.merchant_id, WriteOutcome(outcome).value).inc(
                count
            )
        if seconds is not None:
            self.observe_write(seconds)
        with self._book.editing(self.merchant_id) as state:
            state.last_commit_at = self._book.clock()

    def changes_applied(self, count: int) -> None:
        self._series.changes_applied.labels(self.merchant_id).inc(count)

    def observe_write(self, seconds: float) -> None:
        """Duration of one warehouse write transaction, from whoever times the commits."""
        self._series.warehouse_write_duration.labels(self.merchant_id).observe(seconds)

    def quarantined(self, source: str, count: int) -> None:
        self._series.records_quarantined.labels(self.merchant_id, job_kind(source)).inc(count)

    def unknown_fields(self, rows: Mapping[str, int]) -> None:
        """Rows per unknown member name; the label stays bounded whatever the platform sends
        (``MAX_UNKNOWN_FIELDS`` names per merchant, the rest as one)."""
        with self._book.editing(self.merchant_id) as state:
            labels = {}
            for name in rows:
                if name not in state.unknown_fields and len(state.unknown_fields) < (
                    MAX_UNKNOWN_FIELDS
                ):
                    state.unknown_fields.add(name)
                labels[name] = name if name in state.unknown_fields else OTHER_FIELDS_LABEL
        for name, count in rows.items():
            self._series.record_fields_unknown.labels(self.merchant_id, labels[name]).inc(count)

    # -- the snapshot and the tail ----------------------------------------------------------

    def windows_planned(self, job: str, total: int, done: int) -> None:
        with self._book.editing(self.merchant_id) as state:
            state.jobs[job_kind(job)] = JobProgress(
                total=total, done=done, planned_at=self._book.clock(), done_at_plan=done
            )

    def window_done(self, job: str) -> None:
        with self._book.editing(self.merchant_id) as state:
            progress = state.jobs.get(job_kind(job))
            if progress is not None:
                progress.done = min(progress.done + 1, progress.total)

    def tail_position(
        self, *, has_more: bool, projection_as_of: datetime | None, last_sequence: str | None
    ) -> None:
        """Where the tail stands after a committed change page (spec: Record changes)."""
        with self._book.editing(self.merchant_id) as state:
            state.tail_has_more = has_more
            if last_sequence is not None:
                state.tail_last_sequence = sequence_as_float(last_sequence)
            if projection_as_of is not None:
                state.projection_as_of = projection_as_of.timestamp()

    def tail_wait(self, seconds: float) -> None:
        """The tail's wait before its next read, as its pacing decided (``sync.tail_pace``)."""
        with self._book.editing(self.merchant_id) as state:
            state.tail_wait = seconds

    # -- health of the sync -----------------------------------------------------------------

    def drift_checked(self, rows_behind: int) -> None:
        """A drift check finished; ``rows_behind`` > 0 is an alert, not a silent fix."""
        self._series.drift_checks.labels(self.merchant_id).inc()
        with self._book.editing(self.merchant_id) as state:
            state.drift_rows_behind = rows_behind

    def drift_check_scheduled(self, interval: float) -> None:
        """The merchant's drift check runs every ``interval`` seconds here from now on; its
        age counts from now until its first run ends."""
        with self._book.editing(self.merchant_id) as state:
            state.drift_interval = interval
            state.drift_ran_at = self._book.clock()

    def revisions_pruned(self, count: int) -> None:
        """``count`` superseded revisions left ``record_revisions`` (revision retention)."""
        self._series.revisions_pruned.labels(self.merchant_id).inc(count)

    def drift_check_ran(self) -> None:
        """A drift check run ended: it compared the last closed day, or found nothing to
        compare yet (the snapshot still filling the warehouse)."""
        with self._book.editing(self.merchant_id) as state:
            state.drift_ran_at = self._book.clock()

    def drift_check_deferred(self) -> None:
        """A drift check run gave its thread back and was scheduled again (``Deferred``)."""
        self._series.drift_deferrals.labels(self.merchant_id).inc()

    def catalogue_refreshed(self) -> None:
        """A whole game catalogue pass was committed."""
        self._series.catalogue_refreshes.labels(self.merchant_id).inc()

    def catalogue_available(self, *, available: bool) -> None:
        """Whether the platform serves the game catalogue to the merchant (0: names of games
        are not refreshed; its records sync all the same)."""
        with self._book.editing(self.merchant_id) as state:
            state.catalogue_available = available

    def rebuild_started(self) -> None:
        self._series.rebuilds.labels(self.merchant_id).inc()

    def error(self, kind: str) -> None:
        """A step failed and will be retried; ``kind`` is the exception class name."""
        self._series.errors.labels(self.merchant_id, kind).inc()

    def sync_failed(self, kind: str) -> None:
        """The merchant's sync died of an unexpected error (``kind``: its class name) and
        starts again after a backoff."""
        self._series.sync_failures.labels(self.merchant_id, kind).inc()
