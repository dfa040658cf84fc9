"""Every Prometheus metric of recordsync, defined in this one module.

Names follow the Prometheus conventions: the ``recordsync_`` prefix, base units (seconds,
ratios), ``_total`` for counters, ``_seconds`` for durations and ``_timestamp_seconds`` for
points in time.  ``MetricName`` holds each name exactly as it appears on ``/metrics`` (for
histograms, the base name of the ``_bucket``/``_sum``/``_count`` series), so the dashboards,
the alerts and the tests refer to the same strings.

One process may sync several merchants, each with its own rate budget, cursors and
state, so every series that describes one merchant's sync carries a ``merchant_id`` label and
is fed through that merchant's view, ``Metrics.merchant(merchant_id)``.  The few that describe
the process (``PROCESS_WIDE``: the build, how many merchants it holds, how many replicas it
sees) have no such label.  Merchant ids come from the configuration, so the label is bounded.

Every metric lives in the registry given to ``Metrics`` (a fresh one by default, never the
process-global one implicitly), as prometheus client_python recommends for testability.

This module imports no layer of recordsync: the layers report through adapters that the
service builds (``service.daemon.observers``: the platform client's ``ClientObserver`` and
the engine's ``SyncObserver``), which call a merchant view's methods.  ``watch_budget`` reads a
merchant's rate budget at scrape time (its size changes with the platform's capabilities; its
wait total is kept by the budget itself).

Gauges are computed at scrape time from what was reported, never kept in ``Gauge`` objects:
values that depend on "now" (tail freshness, the snapshot's remaining time) keep growing while
nothing happens, which is exactly when someone needs to see them; and ``forget_merchant``
removes every gauge of a merchant handed to another replica at once, so a stale copy here
never looks like a stalled sync.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
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
    # Each merchant's rate budget, read at scrape time.
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
    TAIL_WAIT = "recordsync_tail_wait_seconds"
    TAIL_LAST_SEQUENCE = "recordsync_tail_last_sequence"
    # Health of the sync.
    REBUILDS = "recordsync_rebuilds_total"
    ERRORS = "recordsync_errors_total"
    SYNC_FAILURES = "recordsync_merchant_sync_failures_total"
    DRIFT_CHECKS = "recordsync_drift_checks_total"
    DRIFT_ROWS_BEHIND = "recordsync_drift_rows_behind"
    # The drift check's starvation bound: how long since it last ran to its end,
    # its interval, and how often it gave its periodic thread back behind the sync's reads.
    DRIFT_CHECK_AGE = "recordsync_drift_check_age_seconds"
    DRIFT_CHECK_INTERVAL = "recordsync_drift_check_interval_seconds"
    DRIFT_CHECK_DEFERRALS = "recordsync_drift_check_deferrals_total"
    # Revision retention: superseded revisions deleted from record_revisions.
    REVISIONS_PRUNED = "recordsync_revisions_pruned_total"
    # The game catalogue: passes committed; whether the platform serves it.
    CATALOGUE_REFRESHES = "recordsync_catalogue_refreshes_total"
    CATALOGUE_AVAILABLE = "recordsync_catalogue_available"
    # The fleet: who syncs which merchant.
    LEASE_HELD = "recordsync_lease_held"
    MERCHANTS_HELD = "recordsync_merchants_held"
    REPLICAS_LIVE = "recordsync_replicas_live"
    # Operators' controls: a paused merchant is synced by nobody, on purpose.
    MERCHANT_PAUSED = "recordsync_merchant_paused"
    # Record members the platform added that recordsync does not know (kept in extra_fields):
    # rows that carried each, by member name.
    RECORD_FIELDS_UNKNOWN = "recordsync_record_fields_unknown_total"
    # The process.
    BUILD_INFO = "recordsync_build_info"
    # The warehouse's connection pool: how long a thread waited for a connection.
    POOL_CHECKOUT = "recordsync_warehouse_pool_checkout_seconds"


# The label every per-merchant series carries.
MERCHANT_LABEL: Final = "merchant_id"
# The metrics that describe the process, not one merchant: they have no ``merchant_id``.
PROCESS_WIDE: Final = frozenset(
    {
        MetricName.BUILD_INFO,
        MetricName.MERCHANTS_HELD,
        MetricName.REPLICAS_LIVE,
        MetricName.POOL_CHECKOUT,
    }
)


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

# Label value when a fact is absent: no HTTP status (no answer at all), no ``error.code``.
NONE_LABEL: Final = "none"

# Platform latency: a page of 1000 records is usually well under a second; the client's
# timeout is 30 s.
REQUEST_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# One transaction of up to 1000 upserted rows plus a cursor.
WRITE_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A checkout from the pool: well under a millisecond when a connection is idle, a connect
# (milliseconds) when the pool grows, up to the pool's 30 s timeout when it is exhausted.
CHECKOUT_BUCKETS: Final = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


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


@dataclass(slots=True)
class _MerchantState:
    """What one merchant's gauges show, as reported in this process (None: nothing yet)."""

    jobs: dict[str, _JobProgress] = field(default_factory=dict)
    last_commit_at: float | None = None
    projection_as_of: float | None = None
    tail_has_more: bool | None = None
    tail_wait: float | None = None
    tail_last_sequence: float | None = None
    drift_rows_behind: int | None = None
    drift_interval: float | None = None  # seconds; None: no drift check scheduled here
    drift_ran_at: float | None = None  # last run ended, or the check was scheduled
    catalogue_available: bool | None = None
    budget: BudgetView | None = None
    unknown_fields: set[str] = field(default_factory=set)  # the names labelled so far

    def copy(self) -> _MerchantState:
        return replace(
            self,
            jobs={kind: replace(job) for kind, job in self.jobs.items()},
            unknown_fields=set(self.unknown_fields),
        )


@dataclass(frozen=True, slots=True)
class _Snapshot:
    merchants: dict[str, _MerchantState]
    leases: dict[str, bool]
    replicas_live: int | None
    paused: dict[str, bool]
    now: float


class _Book:
    """The reported values the gauges read at scrape time, behind one lock.

    Observers report from the tail and snapshot worker threads of every merchant; scrapes
    read from the health server's threads.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._merchants: dict[str, _MerchantState] = {}
        self._leases: dict[str, bool] = {}
        self._replicas_live: int | None = None
        self._paused: dict[str, bool] = {}
        self.lease_confirmed: Callable[[str], bool] | None = None

    @contextmanager
    def editing(self, merchant_id: str) -> Iterator[_MerchantState]:
        """The merchant's state, created when absent, locked while the block runs."""
        with self._lock:
            yield self._merchants.setdefault(merchant_id, _MerchantState())

    def last_commit_at(self, merchant_id: str) -> float | None:
        with self._lock:
            state = self._merchants.get(merchant_id)
            return None if state is None else state.last_commit_at

    def set_lease_held(self, merchant_id: str, *, held: bool) -> None:
        with self._lock:
            self._leases[merchant_id] = held
            if held:
                # A merchant held here shows its last commit (0: none yet) from now on, so
                # a holder stuck before its first page is seen by the stall alert.
                self._merchants.setdefault(merchant_id, _MerchantState())

    def set_replicas_live(self, count: int) -> None:
        with self._lock:
            self._replicas_live = count

    def set_paused(self, merchant_id: str, *, paused: bool) -> None:
        with self._lock:
            self._paused[merchant_id] = paused

    def forget(self, merchant_id: str) -> None:
        with self._lock:
            self._merchants.pop(merchant_id, None)
            self._leases[merchant_id] = False

    def snapshot(self) -> _Snapshot:
        confirmed = self.lease_confirmed
        with self._lock:
            leases = dict(self._leases)
            merchants = {mid: state.copy() for mid, state in self._merchants.items()}
        if confirmed is not None:  # asked outside the lock: it takes the fleet session's
            leases = {mid: held and confirmed(mid) for mid, held in leases.items()}
        with self._lock:
            return _Snapshot(
                merchants=merchants,
                leases=leases,
                replicas_live=self._replicas_live,
                paused=dict(self._paused),
                now=self.clock(),
            )


@dataclass(frozen=True, slots=True)
class _Instruments:
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
    def register(cls, reg: CollectorRegistry) -> _Instruments:
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

    def __init__(self, merchant_id: str, instruments: _Instruments, book: _Book) -> None:
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
            state.jobs[job_kind(job)] = _JobProgress(
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


class Metrics:
    """All recordsync metrics in one registry: per-merchant views, leases and replicas.

    ``clock`` returns Unix seconds (``time.time``): it stamps the last commit and measures tail
    freshness against ``projection_as_of``, which is platform wall time.  Thread-safe: the
    observers are called from the tail and snapshot worker threads of every merchant.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        clock: Callable[[], float] = time.time,
        version: str = __version__,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._book = _Book(clock)
        self._instruments = _Instruments.register(self.registry)
        build_info = Gauge(
            MetricName.BUILD_INFO,
            "Always 1; the version of recordsync running, as a label.",
            ["version"],
            registry=self.registry,
        )
        build_info.labels(version=version).set(1)
        self._pool_checkout = Histogram(
            MetricName.POOL_CHECKOUT,
            "Time a thread waited for a connection of the warehouse's pool (a connect "
            "included): a long one means the pool is too small for the process's threads.",
            buckets=CHECKOUT_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_ScrapeTimeCollector(self._book))
        self.round_events = RoundEventMetrics(self.registry)

    def pool_checkout(self, seconds: float) -> None:
        """One checkout from the warehouse's pool took ``seconds`` (``warehouse.pool``)."""
        self._pool_checkout.observe(seconds)

    def merchant(self, merchant_id: str) -> MerchantMetrics:
        """The view that feeds ``merchant_id``'s series (cheap: build one per observer)."""
        return MerchantMetrics(_checked(merchant_id), self._instruments, self._book)

    def watch_budget(self, merchant_id: str, budget: BudgetView) -> None:
        """Expose ``budget`` (the merchant's own) at every scrape: size, wait total, queue."""
        with self._book.editing(_checked(merchant_id)) as state:
            state.budget = budget

    def last_commit_at(self, merchant_id: str) -> float | None:
        """Unix time of the merchant's last page committed here (for readiness), or None."""
        return self._book.last_commit_at(merchant_id)

    def set_lease_held(self, merchant_id: str, *, held: bool) -> None:
        """Whether this process holds ``merchant_id``'s lease now.

        Set every configured merchant, held or not, so that a merchant nobody holds shows as
        0 on every replica (``max by (merchant_id)`` is 0: an alert) rather than as nothing.
        ``recordsync_merchants_held`` counts the merchants held.
        """
        self._book.set_lease_held(_checked(merchant_id), held=held)

    def set_paused(self, merchant_id: str, *, paused: bool) -> None:
        """Whether operators paused ``merchant_id`` (every configured merchant, every tick)."""
        self._book.set_paused(_checked(merchant_id), paused=paused)

    def set_paused_among(self, merchant_ids: Iterable[str], paused: Collection[str]) -> None:
        """``set_paused`` for each of ``merchant_ids``: paused when it is in ``paused``."""
        for merchant_id in merchant_ids:
            self.set_paused(merchant_id, paused=merchant_id in paused)

    def watch_leases(self, confirmed: Callable[[str], bool]) -> None:
        """``recordsync_lease_held`` is 1 only while ``confirmed(merchant)`` says the lease is
        still confirmed (``FleetSession.confirmed``): a replica cut off from the database
        shows 0 at once, before another replica takes the merchant."""
        self._book.lease_confirmed = confirmed

    def set_replicas_live(self, count: int) -> None:
        """How many replicas (this one included) the fleet saw alive at its last heartbeat."""
        if count < 0:
            raise ValueError(f"a replica count cannot be negative: {count}")
        self._book.set_replicas_live(count)

    def forget_merchant(self, merchant_id: str) -> None:
        """The merchant was handed to another replica: its gauges go, its lease reads 0.

        Every gauge of the merchant disappears from the next scrape (its budget, snapshot,
        tail, last commit and drift figures are the new holder's to report now).  Its counters
        and histograms stay: they count what this process did, and a rate over them falls to
        zero by itself.  Call it once the merchant's engine has stopped: a later report brings
        the gauges back.
        """
        self._book.forget(merchant_id)
        self.round_events.forget(merchant_id)


class RoundEventMetricName(StrEnum):
    """The round-end notification receiver's metrics, each labelled ``merchant_id``:
    a configured merchant, or ``none`` for a request that named no configured one (so what a
    stranger sends cannot add series)."""

    EVENTS = "recordsync_round_events_total"
    WAKEUPS = "recordsync_round_event_wakeups_total"
    REPLY_DURATION = "recordsync_round_event_reply_duration_seconds"
    ROUNDS_ANNOUNCED_MISSING = "recordsync_rounds_announced_missing"


class EventOutcome(StrEnum):
    """``outcome`` label of ``recordsync_round_events_total``."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"  # an event_id already stored: the first reply again, nothing changed
    REFUSED = "refused"  # an error reply; ``code`` says which


class WakeVia(StrEnum):
    """``via`` label of ``recordsync_round_event_wakeups_total``: who woke the tail."""

    LOCAL = "local"  # this replica received the event and holds the merchant
    WAREHOUSE = "warehouse"  # another replica received it (NOTIFY or the poll told us)


# A reply is a verification, one insert and a wake-up: milliseconds, unless the warehouse lags.
REPLY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class RoundEventMetrics:
    """The receiver's counters and histogram, the wake-ups, and the cross-check's gauge.

    Built by ``Metrics`` in its registry (``Metrics.round_events``).  Thread-safe.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._events = Counter(
            RoundEventMetricName.EVENTS,
            "Round-end notifications received, by outcome and error code (none: accepted).",
            [MERCHANT_LABEL, "outcome", "code"],
            registry=registry,
        )
        self._wakeups = Counter(
            RoundEventMetricName.WAKEUPS,
            "Tail read-now requests caused by round-end notifications, by who received them.",
            [MERCHANT_LABEL, "via"],
            registry=registry,
        )
        self._reply = Histogram(
            RoundEventMetricName.REPLY_DURATION,
            "Time from a notification's last body byte to its reply.",
            [MERCHANT_LABEL],
            buckets=REPLY_BUCKETS,
            registry=registry,
        )
        self._missing = Gauge(
            RoundEventMetricName.ROUNDS_ANNOUNCED_MISSING,
            "Rounds announced by a round-end notification longer ago than the grace that the "
            "warehouse's records still lack (the cross-check).",
            [MERCHANT_LABEL],
            registry=registry,
        )

    def received(
        self, merchant_id: str | None, outcome: EventOutcome, code: str | None, seconds: float
    ) -> None:
        label = merchant_id or NONE_LABEL
        self._events.labels(label, outcome.value, code or NONE_LABEL).inc()
        self._reply.labels(label).observe(seconds)

    def woke(self, merchant_id: str, via: WakeVia) -> None:
        self._wakeups.labels(_checked(merchant_id), via.value).inc()

    def set_missing(self, merchant_id: str, rounds: int) -> None:
        self._missing.labels(_checked(merchant_id)).set(rounds)

    def forget(self, merchant_id: str) -> None:
        """The merchant went to another replica: its cross-check is that replica's now."""
        with contextlib.suppress(KeyError):
            self._missing.remove(merchant_id)


def _checked(merchant_id: str) -> str:
    if not merchant_id:
        # An empty label value is the same as no label: that merchant's series would mix.
        raise ValueError("merchant_id must not be empty")
    return merchant_id


class _ScrapeTimeCollector(Collector):
    """Every gauge, computed per scrape from the book (and the rate budgets it points to)."""

    def __init__(self, book: _Book) -> None:
        self._book = book

    def describe(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        return _families(_Snapshot(merchants={}, leases={}, replicas_live=None, paused={}, now=0.0))

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        return iter(_families(self._book.snapshot()))


def _families(snapshot: _Snapshot) -> list[CounterMetricFamily | GaugeMetricFamily]:
    merchants = sorted(snapshot.merchants.items())
    return [
        *_budget_families(merchants),
        *_snapshot_families(merchants, snapshot.now),
        *_sync_families(merchants, snapshot.now),
        *_fleet_families(snapshot),
    ]


def _budget_families(
    merchants: list[tuple[str, _MerchantState]],
) -> list[CounterMetricFamily | GaugeMetricFamily]:
    """Each merchant's rate budget (spec: Limits, "Record rate" is per merchant)."""
    labels = [MERCHANT_LABEL]
    wait = CounterMetricFamily(
        MetricName.RATE_BUDGET_WAIT,
        "Seconds callers spent blocked waiting for a slot of the merchant's rate budget.",
        labels=labels,
    )
    requests = GaugeMetricFamily(
        MetricName.RATE_BUDGET_REQUESTS,
        "Requests allowed per window by the merchant's record budget (capabilities.limits).",
        labels=labels,
    )
    window = GaugeMetricFamily(
        MetricName.RATE_BUDGET_WINDOW,
        "Length of the merchant's record budget window (capabilities.limits).",
        labels=labels,
    )
    waiting = GaugeMetricFamily(
        MetricName.RATE_BUDGET_WAITING,
        "Callers blocked on the merchant's rate budget right now.",
        labels=labels,
    )
    for merchant_id, state in merchants:
        budget = state.budget
        if budget is not None:
            wait.add_metric([merchant_id], budget.waited_seconds_total)
            requests.add_metric([merchant_id], budget.requests)
            window.add_metric([merchant_id], budget.seconds)
            waiting.add_metric([merchant_id], budget.waiting)
    return [wait, requests, window, waiting]


def _snapshot_families(
    merchants: list[tuple[str, _MerchantState]], now: float
) -> list[GaugeMetricFamily]:
    labels = [MERCHANT_LABEL, "kind"]
    total = GaugeMetricFamily(
        MetricName.SNAPSHOT_WINDOWS_TOTAL,
        "Snapshot windows planned, by job kind (rebuild: the history; backfill).",
        labels=labels,
    )
    done = GaugeMetricFamily(
        MetricName.SNAPSHOT_WINDOWS_DONE,
        "Snapshot windows fully read and committed, by job kind.",
        labels=labels,
    )
    ratio = GaugeMetricFamily(
        MetricName.SNAPSHOT_PROGRESS,
        "Fraction of snapshot windows done (backfill progress), by job kind.",
        labels=labels,
    )
    remaining = GaugeMetricFamily(
        MetricName.SNAPSHOT_REMAINING,
        "Estimated time the snapshot has left at the rate windows were done since start; "
        "absent until a window is done.",
        labels=labels,
    )
    for merchant_id, state in merchants:
        for kind, progress in sorted(state.jobs.items()):
            key = [merchant_id, kind]
            total.add_metric(key, progress.total)
            done.add_metric(key, progress.done)
            ratio.add_metric(key, progress.done / progress.total if progress.total else 1.0)
            estimate = estimate_remaining_seconds(
                total=progress.total,
                done=progress.done,
                done_since_start=progress.done - progress.done_at_plan,
                elapsed=now - progress.planned_at,
            )
            if estimate is not None:
                remaining.add_metric(key, estimate)
    return [total, done, ratio, remaining]


def _sync_families(
    merchants: list[tuple[str, _MerchantState]], now: float
) -> list[GaugeMetricFamily]:
    labels = [MERCHANT_LABEL]
    freshness = GaugeMetricFamily(
        MetricName.TAIL_FRESHNESS,
        "Seconds between now and the projection_as_of of the last committed change page.",
        labels=labels,
    )
    has_more = GaugeMetricFamily(
        MetricName.TAIL_HAS_MORE,
        "1 while the last change page said has_more (a backlog remains), else 0.",
        labels=labels,
    )
    wait = GaugeMetricFamily(
        MetricName.TAIL_WAIT,
        "Seconds the change tail waits between reads now: the poll interval while changes "
        "flow, longer over empty pages while a snapshot runs or notifications wake it.",
        labels=labels,
    )
    last_sequence = GaugeMetricFamily(
        MetricName.TAIL_LAST_SEQUENCE,
        "Highest change sequence committed, as a float: a progress indicator, not exact "
        "beyond 2^53.",
        labels=labels,
    )
    last_commit = GaugeMetricFamily(
        MetricName.LAST_COMMIT,
        "Unix time of the last page of the merchant committed by this process; 0 while it "
        "holds the merchant but has committed nothing yet.",
        labels=labels,
    )
    rows_behind = GaugeMetricFamily(
        MetricName.DRIFT_ROWS_BEHIND,
        "Rows whose warehouse revision was lower than the platform's at the last drift "
        "check; non-zero is an alert.",
        labels=labels,
    )
    drift_age = GaugeMetricFamily(
        MetricName.DRIFT_CHECK_AGE,
        "Seconds since the merchant's drift check last ran to its end here (or was "
        "scheduled); past twice its interval, it was starved (see the deferrals).",
        labels=labels,
    )
    drift_interval = GaugeMetricFamily(
        MetricName.DRIFT_CHECK_INTERVAL,
        "Seconds between the merchant's drift checks (RECORDSYNC_DRIFT_CHECK_INTERVAL).",
        labels=labels,
    )
    catalogue_available = GaugeMetricFamily(
        MetricName.CATALOGUE_AVAILABLE,
        "1 while the platform serves the game catalogue to the merchant, 0 while it refuses "
        "it (the catalogue alone is off; records sync); absent before the first pass.",
        labels=labels,
    )
    for merchant_id, state in merchants:
        key = [merchant_id]
        if state.catalogue_available is not None:
            catalogue_available.add_metric(key, 1 if state.catalogue_available else 0)
        if state.projection_as_of is not None:
            freshness.add_metric(key, max(now - state.projection_as_of, 0.0))
        if state.tail_has_more is not None:
            has_more.add_metric(key, 1 if state.tail_has_more else 0)
        if state.tail_wait is not None:
            wait.add_metric(key, state.tail_wait)
        if state.tail_last_sequence is not None:
            last_sequence.add_metric(key, state.tail_last_sequence)
        last_commit.add_metric(key, 0.0 if state.last_commit_at is None else state.last_commit_at)
        if state.drift_rows_behind is not None:
            rows_behind.add_metric(key, state.drift_rows_behind)
        if state.drift_interval is not None and state.drift_ran_at is not None:
            drift_interval.add_metric(key, state.drift_interval)
            drift_age.add_metric(key, max(now - state.drift_ran_at, 0.0))
    return [
        freshness,
        has_more,
        wait,
        last_sequence,
        last_commit,
        rows_behind,
        drift_age,
        drift_interval,
        catalogue_available,
    ]


def _fleet_families(snapshot: _Snapshot) -> list[GaugeMetricFamily]:
    lease_held = GaugeMetricFamily(
        MetricName.LEASE_HELD,
        "1 while this process holds the merchant's lease and syncs it, else 0.",
        labels=[MERCHANT_LABEL],
    )
    for merchant_id, held in sorted(snapshot.leases.items()):
        lease_held.add_metric([merchant_id], 1 if held else 0)
    merchants_held = GaugeMetricFamily(
        MetricName.MERCHANTS_HELD,
        "Merchants whose lease this process holds now.",
        value=sum(snapshot.leases.values()),
    )
    replicas_live = GaugeMetricFamily(
        MetricName.REPLICAS_LIVE,
        "Replicas (this one included) seen alive at the fleet's last heartbeat; absent "
        "until the fleet reports.",
    )
    if snapshot.replicas_live is not None:
        replicas_live.add_metric([], snapshot.replicas_live)
    paused = GaugeMetricFamily(
        MetricName.MERCHANT_PAUSED,
        "1 while an operator has paused the merchant (recordsync merchant pause): no replica "
        "syncs it, and its staleness and not-held alerts stay silent; else 0.",
        labels=[MERCHANT_LABEL],
    )
    for merchant_id, is_paused in sorted(snapshot.paused.items()):
        paused.add_metric([merchant_id], 1 if is_paused else 0)
    return [lease_held, merchants_held, replicas_live, paused]


# -- recordsync verify (a one-shot command) ------------------------------------------------------


class VerifyMetricName(StrEnum):
    """The metrics of one ``recordsync verify`` run.

    Verify is a one-shot command with no ``/metrics`` server: it writes these to the file
    ``--metrics-file`` names, for node_exporter's textfile collector (docs/operations.md), so
    they are kept apart from ``MetricName``, which the daemon serves.
    """

    RUNS = "recordsync_verify_runs_total"
    DIFFERENCES = "recordsync_verify_differences"
    REPAIRED = "recordsync_verify_repaired_rows"
    LAST_RUN = "recordsync_verify_last_run_timestamp_seconds"


def record_verify_run(
    registry: CollectorRegistry,
    merchant_id: str,
    *,
    clean: bool,
    differences: Mapping[str, int],
    repaired: int,
    clock: Callable[[], float] = time.time,
) -> None:
    """Put one verify run into ``registry``: its outcome, each kind of difference, repairs."""
    merchant_id = _checked(merchant_id)
    runs = Counter(
        VerifyMetricName.RUNS.removesuffix("_total"),
        "Verify runs, by outcome: clean, or differences found (missing, behind or different).",
        [MERCHANT_LABEL, "outcome"],
        registry=registry,
    )
    runs.labels(merchant_id, "clean" if clean else "differences").inc()
    found = Gauge(
        VerifyMetricName.DIFFERENCES,
        "Rows of each kind of difference the last verify run found.",
        [MERCHANT_LABEL, "kind"],
        registry=registry,
    )
    for kind, count in differences.items():
        found.labels(merchant_id, kind).set(count)
    Gauge(
        VerifyMetricName.REPAIRED,
        "Rows the last verify --repair run wrote back from the platform's records.",
        [MERCHANT_LABEL],
        registry=registry,
    ).labels(merchant_id).set(repaired)
    Gauge(
        VerifyMetricName.LAST_RUN,
        "When the last verify run finished (Unix time).",
        [MERCHANT_LABEL],
        registry=registry,
    ).labels(merchant_id).set(clock())
