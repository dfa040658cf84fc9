"""Every Prometheus metric of recordsync, defined in this one module.

Names follow the Prometheus conventions: the ``recordsync_`` prefix, base units (seconds,
ratios), ``_total`` for counters, ``_seconds`` for durations and ``_timestamp_seconds`` for
points in time.  ``MetricName`` holds each name exactly as it appears on ``/metrics`` (for
histograms, the base name of the ``_bucket``/``_sum``/``_count`` series), so the dashboard and
the tests refer to the same strings.

Every metric lives in the registry given to ``Metrics`` (a fresh one by default, never the
process-global one implicitly), as prometheus client_python recommends for testability.

This module imports no layer of recordsync: the layers report through adapters that the
service builds (``recordsync.service.observers``: the platform client's ``ClientObserver`` and
the engine's ``SyncObserver``), which call the public methods here.  ``watch_budget(budget)``
reads the shared rate budget at scrape time (its size changes with the platform's
capabilities; its wait total is kept by the budget itself).

Values that depend on "now" (tail freshness, the snapshot's remaining time) are computed at
scrape time from the injected clock, so they keep growing while nothing happens, which is
exactly when someone needs to see them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from recordsync import __version__


class MetricName(StrEnum):
    """The name of every metric as scraped (histograms: without ``_bucket``/``_sum``...)."""

    # Platform client (spec: Errors; Limits, "Record rate").
    PLATFORM_REQUESTS = "recordsync_platform_requests_total"
    PLATFORM_REQUEST_DURATION = "recordsync_platform_request_duration_seconds"
    PLATFORM_RETRIES = "recordsync_platform_retries_total"
    PLATFORM_RATE_LIMITED = "recordsync_platform_rate_limited_total"
    # The shared rate budget, read at scrape time.
    RATE_BUDGET_WAIT = "recordsync_rate_budget_wait_seconds_total"
    RATE_BUDGET_REQUESTS = "recordsync_rate_budget_requests"
    RATE_BUDGET_WINDOW = "recordsync_rate_budget_window_seconds"
    RATE_BUDGET_WAITING = "recordsync_rate_budget_waiting"
    # Writes.
    RECORDS_WRITTEN = "recordsync_records_written_total"
    CHANGES_APPLIED = "recordsync_changes_applied_total"
    PAGES_COMMITTED = "recordsync_pages_committed_total"
    RECORDS_QUARANTINED = "recordsync_records_quarantined_total"
    WAREHOUSE_WRITE_DURATION = "recordsync_warehouse_write_duration_seconds"
    LAST_COMMIT = "recordsync_last_commit_timestamp_seconds"
    # Snapshot windows (the daemon's history snapshot and one-shot backfills).
    SNAPSHOT_WINDOWS_TOTAL = "recordsync_snapshot_windows"
    SNAPSHOT_WINDOWS_DONE = "recordsync_snapshot_windows_done"
    SNAPSHOT_PROGRESS = "recordsync_snapshot_progress_ratio"
    SNAPSHOT_REMAINING = "recordsync_snapshot_remaining_seconds"
    # The change tail.
    TAIL_FRESHNESS = "recordsync_tail_freshness_seconds"
    TAIL_HAS_MORE = "recordsync_tail_has_more"
    TAIL_LAST_SEQUENCE = "recordsync_tail_last_sequence"
    # Health of the sync.
    REBUILDS = "recordsync_rebuilds_total"
    ERRORS = "recordsync_errors_total"
    DRIFT_CHECKS = "recordsync_drift_checks_total"
    DRIFT_ROWS_BEHIND = "recordsync_drift_rows_behind"
    BUILD_INFO = "recordsync_build_info"


class WriteOutcome(StrEnum):
    """``outcome`` label of ``recordsync_records_written_total``.

    ``WRITTEN`` is used while the warehouse reports only how many rows it sent to the upsert;
    once it reports the split, callers pass inserted/updated/skipped instead.
    """

    INSERTED = "inserted"
    UPDATED = "updated"
    SKIPPED = "skipped"  # not newer than the stored revision
    WRITTEN = "written"


# Label value when a fact is absent: no HTTP status (no answer at all), no ``error.code``.
NONE_LABEL: Final = "none"

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


def estimate_remaining_seconds(
    *, total: int, done: int, done_since_start: int, elapsed: float
) -> float | None:
    """Time the snapshot has left at the rate windows were completed since it started here.

    None while nothing can be said (no window finished yet in this process); 0 when done.
    The average since the start, not a recent rate: windows differ in size (busy days, quiet
    days) and a longer average is steadier; it still grows while progress stalls, because
    ``elapsed`` keeps growing.
    """
    remaining = max(total - done, 0)
    if remaining == 0:
        return 0.0
    if done_since_start <= 0 or elapsed <= 0:
        return None
    return remaining * elapsed / done_since_start


class BudgetView(Protocol):
    """What the metrics read from ``recordsync.platform.budget.RateBudget``."""

    @property
    def requests(self) -> int: ...

    @property
    def seconds(self) -> float: ...

    @property
    def waited_seconds_total(self) -> float: ...

    @property
    def waiting(self) -> int: ...


@dataclass(slots=True)
class _JobProgress:
    total: int
    done: int
    planned_at: float  # clock when the windows were planned (or resumed) in this process
    done_at_plan: int


class Metrics:
    """All recordsync metrics in one registry, and the adapters that feed them.

    ``clock`` returns Unix seconds (``time.time``): it stamps the last commit and measures tail
    freshness against ``projection_as_of``, which is platform wall time.  Thread-safe: the
    observers are called from the tail and snapshot worker threads.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        clock: Callable[[], float] = time.time,
        version: str = __version__,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, _JobProgress] = {}
        self._projection_as_of: float | None = None
        self._last_commit_at: float | None = None
        self._budget: BudgetView | None = None
        reg = self.registry

        self.platform_requests = Counter(
            MetricName.PLATFORM_REQUESTS,
            "Platform API requests by endpoint, HTTP status and error.code (none: no answer).",
            ["endpoint", "status", "code"],
            registry=reg,
        )
        self.platform_request_duration = Histogram(
            MetricName.PLATFORM_REQUEST_DURATION,
            "Duration of one platform request attempt, retries counted separately.",
            ["endpoint"],
            buckets=REQUEST_BUCKETS,
            registry=reg,
        )
        self.platform_retries = Counter(
            MetricName.PLATFORM_RETRIES,
            "Platform requests sent again, by endpoint and reason.",
            ["endpoint", "reason"],
            registry=reg,
        )
        self.platform_rate_limited = Counter(
            MetricName.PLATFORM_RATE_LIMITED,
            "429 RATE_LIMITED answers received; each pauses the shared budget.",
            ["endpoint"],
            registry=reg,
        )
        self.records_written = Counter(
            MetricName.RECORDS_WRITTEN,
            "Records committed to the warehouse, by outcome.",
            ["outcome"],
            registry=reg,
        )
        self.changes_applied = Counter(
            MetricName.CHANGES_APPLIED,
            "Changes from record-changes committed with their cursor.",
            registry=reg,
        )
        self.pages_committed = Counter(
            MetricName.PAGES_COMMITTED,
            "Pages committed with their cursor, by source (tail, rebuild, backfill).",
            ["source"],
            registry=reg,
        )
        self.records_quarantined = Counter(
            MetricName.RECORDS_QUARANTINED,
            "Items that failed validation and were stored in the quarantine, by source.",
            ["source"],
            registry=reg,
        )
        self.warehouse_write_duration = Histogram(
            MetricName.WAREHOUSE_WRITE_DURATION,
            "Duration of one page's warehouse transaction (rows, quarantine and cursor).",
            buckets=WRITE_BUCKETS,
            registry=reg,
        )
        self.last_commit = Gauge(
            MetricName.LAST_COMMIT,
            "Unix time of the last page committed by this process.",
            registry=reg,
        )
        self.tail_has_more = Gauge(
            MetricName.TAIL_HAS_MORE,
            "1 while the last change page said has_more (a backlog remains), else 0.",
            registry=reg,
        )
        self.tail_last_sequence = Gauge(
            MetricName.TAIL_LAST_SEQUENCE,
            "Highest change sequence committed, as a float: a progress indicator, not exact "
            "beyond 2^53.",
            registry=reg,
        )
        self.rebuilds = Counter(
            MetricName.REBUILDS,
            "Rebuilds started because the change cursor expired (new anchor and snapshot).",
            registry=reg,
        )
        self.errors = Counter(
            MetricName.ERRORS,
            "Failed sync steps that will be tried again, by exception class.",
            ["kind"],
            registry=reg,
        )
        self.drift_checks = Counter(
            MetricName.DRIFT_CHECKS,
            "Drift checks completed (a closed 24 h window re-read and compared).",
            registry=reg,
        )
        self.drift_rows_behind = Gauge(
            MetricName.DRIFT_ROWS_BEHIND,
            "Rows whose warehouse revision was lower than the platform's at the last drift "
            "check; non-zero is an alert.",
            registry=reg,
        )
        self.build_info = Gauge(
            MetricName.BUILD_INFO,
            "Always 1; the version of recordsync running, as a label.",
            ["version"],
            registry=reg,
        )
        self.build_info.labels(version=version).set(1)
        reg.register(_BudgetCollector(self))
        reg.register(_ScrapeTimeCollector(self))

    # -- sources read at scrape time -------------------------------------------------------

    def watch_budget(self, budget: BudgetView) -> None:
        """Expose ``budget``'s size, wait total and queue at every scrape."""
        with self._lock:
            self._budget = budget

    # -- reports ----------------------------------------------------------------------------

    @property
    def last_commit_at(self) -> float | None:
        """Unix time of the last committed page in this process (for readiness), or None."""
        with self._lock:
            return self._last_commit_at

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
        now = self._clock()
        self.pages_committed.labels(source=job_kind(source)).inc()
        split = outcomes if outcomes is not None else {WriteOutcome.WRITTEN: records}
        for outcome, count in split.items():
            self.records_written.labels(outcome=WriteOutcome(outcome).value).inc(count)
        if seconds is not None:
            self.warehouse_write_duration.observe(seconds)
        self.last_commit.set(now)
        with self._lock:
            self._last_commit_at = now

    def observe_write(self, seconds: float) -> None:
        """Duration of one warehouse write transaction, from whoever times the commits."""
        self.warehouse_write_duration.observe(seconds)

    def drift_checked(self, rows_behind: int) -> None:
        """A drift check finished; ``rows_behind`` > 0 is an alert, not a silent fix."""
        self.drift_checks.inc()
        self.drift_rows_behind.set(rows_behind)

    # -- fed by the sync's observer (recordsync.service.observers) -------------------------

    def windows_planned(self, job: str, total: int, done: int) -> None:
        with self._lock:
            self._jobs[job_kind(job)] = _JobProgress(
                total=total, done=done, planned_at=self._clock(), done_at_plan=done
            )

    def window_done(self, job: str) -> None:
        with self._lock:
            progress = self._jobs.get(job_kind(job))
            if progress is not None:
                progress.done = min(progress.done + 1, progress.total)

    def tail_position(
        self, *, has_more: bool, projection_as_of: datetime | None, last_sequence: str | None
    ) -> None:
        self.tail_has_more.set(1 if has_more else 0)
        if last_sequence is not None:
            self.tail_last_sequence.set(sequence_as_float(last_sequence))
        if projection_as_of is not None:
            with self._lock:
                self._projection_as_of = projection_as_of.timestamp()

    # -- read at scrape time ----------------------------------------------------------------

    def _snapshot_samples(self) -> tuple[dict[str, _JobProgress], float | None, float]:
        with self._lock:
            jobs = {kind: _copy(progress) for kind, progress in self._jobs.items()}
            return jobs, self._projection_as_of, self._clock()


def _copy(progress: _JobProgress) -> _JobProgress:
    return _JobProgress(progress.total, progress.done, progress.planned_at, progress.done_at_plan)


class _BudgetCollector(Collector):
    """The rate budget's own figures, read when scraped (it may be resized at any time)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        return self._families(None)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        with self._metrics._lock:  # noqa: SLF001 - same module
            budget = self._metrics._budget  # noqa: SLF001 - same module
        return iter(self._families(budget))

    @staticmethod
    def _families(
        budget: BudgetView | None,
    ) -> list[CounterMetricFamily | GaugeMetricFamily]:
        wait = CounterMetricFamily(
            MetricName.RATE_BUDGET_WAIT,
            "Seconds callers spent blocked waiting for a slot of the shared rate budget.",
        )
        requests = GaugeMetricFamily(
            MetricName.RATE_BUDGET_REQUESTS,
            "Requests allowed per window by the shared record budget (capabilities.limits).",
        )
        window = GaugeMetricFamily(
            MetricName.RATE_BUDGET_WINDOW,
            "Length of the shared record budget's window (capabilities.limits).",
        )
        waiting = GaugeMetricFamily(
            MetricName.RATE_BUDGET_WAITING, "Callers blocked on the rate budget right now."
        )
        if budget is not None:
            wait.add_metric([], budget.waited_seconds_total)
            requests.add_metric([], budget.requests)
            window.add_metric([], budget.seconds)
            waiting.add_metric([], budget.waiting)
        return [wait, requests, window, waiting]


class _ScrapeTimeCollector(Collector):
    """Snapshot progress and tail freshness: they depend on "now", so computed per scrape."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families({}, None, 0.0)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs, projection_as_of, now = self._metrics._snapshot_samples()  # noqa: SLF001
        return iter(self._families(jobs, projection_as_of, now))

    @staticmethod
    def _families(
        jobs: Mapping[str, _JobProgress], projection_as_of: float | None, now: float
    ) -> list[GaugeMetricFamily]:
        total = GaugeMetricFamily(
            MetricName.SNAPSHOT_WINDOWS_TOTAL,
            "Snapshot windows planned, by job kind (rebuild: the history; backfill).",
            labels=["kind"],
        )
        done = GaugeMetricFamily(
            MetricName.SNAPSHOT_WINDOWS_DONE,
            "Snapshot windows fully read and committed, by job kind.",
            labels=["kind"],
        )
        ratio = GaugeMetricFamily(
            MetricName.SNAPSHOT_PROGRESS,
            "Fraction of snapshot windows done (backfill progress), by job kind.",
            labels=["kind"],
        )
        remaining = GaugeMetricFamily(
            MetricName.SNAPSHOT_REMAINING,
            "Estimated time the snapshot has left at the rate windows were done since start; "
            "absent until a window is done.",
            labels=["kind"],
        )
        for kind, progress in sorted(jobs.items()):
            total.add_metric([kind], progress.total)
            done.add_metric([kind], progress.done)
            ratio.add_metric([kind], progress.done / progress.total if progress.total else 1.0)
            estimate = estimate_remaining_seconds(
                total=progress.total,
                done=progress.done,
                done_since_start=progress.done - progress.done_at_plan,
                elapsed=now - progress.planned_at,
            )
            if estimate is not None:
                remaining.add_metric([kind], estimate)
        freshness = GaugeMetricFamily(
            MetricName.TAIL_FRESHNESS,
            "Seconds between now and the projection_as_of of the last committed change page.",
        )
        if projection_as_of is not None:
            freshness.add_metric([], max(now - projection_as_of, 0.0))
        return [total, done, ratio, remaining, freshness]
