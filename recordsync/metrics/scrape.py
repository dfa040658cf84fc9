"""The series computed at every scrape: the gauges, from the book and the rate budgets it
points to.

Each is a family built for one scrape from a copy of the book (``Book.snapshot``): a value
that depends on "now" is computed at the scrape's "now", and a merchant the book has forgotten
has none at all.  Each merchant's rate budget is read here, at scrape time: its size changes
with the platform's capabilities, and its wait total (the one counter here) is kept by the
budget itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from recordsync.metrics.book import Book, MerchantState, Snapshot
from recordsync.metrics.names import MERCHANT_LABEL, MetricName


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


class ScrapeTimeCollector(Collector):
    """Every gauge, computed per scrape from the book (and the rate budgets it points to)."""

    def __init__(self, book: Book) -> None:
        self._book = book

    def describe(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        return _families(Snapshot(merchants={}, leases={}, replicas_live=None, paused={}, now=0.0))

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        return iter(_families(self._book.snapshot()))


def _families(snapshot: Snapshot) -> list[CounterMetricFamily | GaugeMetricFamily]:
    merchants = sorted(snapshot.merchants.items())
    return [
        *_budget_families(merchants),
        *_snapshot_families(merchants, snapshot.now),
        *_sync_families(merchants, snapshot.now),
        *_fleet_families(snapshot),
    ]


def _budget_families(
    merchants: list[tuple[str, MerchantState]],
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
    merchants: list[tuple[str, MerchantState]], now: float
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
    merchants: list[tuple[str, MerchantState]], now: float
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


def _fleet_families(snapshot: Snapshot) -> list[GaugeMetricFamily]:
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
