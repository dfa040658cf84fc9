"""Every metric name of recordsync, and the label that every merchant's series carries.

Names follow the Prometheus conventions: the ``recordsync_`` prefix, base units (seconds,
ratios), ``_total`` for counters, ``_seconds`` for durations and ``_timestamp_seconds`` for
points in time.  Each enum holds the names exactly as they appear on ``/metrics`` (for
histograms, the base name of the ``_bucket``/``_sum``/``_count`` series), so the dashboards,
the alerts, the tests and the modules that build the series refer to the same strings; no
other module of recordsync spells a metric name.

One process may sync several merchants, each with its own rate budget, cursors and state, so
every series that describes one merchant's sync carries a ``merchant_id`` label.  The few that
describe the process (``PROCESS_WIDE``: the build, how many merchants it holds, how many
replicas it sees, the pool) have no such label.  Merchant ids come from the configuration, so
the label is bounded.

This module imports nothing of recordsync: it is what the others agree on.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


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


class RoundEventMetricName(StrEnum):
    """The round-end notification receiver's metrics, each labelled ``merchant_id``:
    a configured merchant, or ``none`` for a request that named no configured one (so what a
    stranger sends cannot add series)."""

    EVENTS = "recordsync_round_events_total"
    WAKEUPS = "recordsync_round_event_wakeups_total"
    REPLY_DURATION = "recordsync_round_event_reply_duration_seconds"
    ROUNDS_ANNOUNCED_MISSING = "recordsync_rounds_announced_missing"


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

# Label value when a fact is absent: no HTTP status (no answer at all), no ``error.code``, no
# configured merchant.
NONE_LABEL: Final = "none"


def merchant_label(merchant_id: str) -> str:
    """``merchant_id`` as the value of ``MERCHANT_LABEL``, refused when empty."""
    if not merchant_id:
        # An empty label value is the same as no label: that merchant's series would mix.
        raise ValueError("merchant_id must not be empty")
    return merchant_id
