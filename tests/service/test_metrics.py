"""Metrics: each adapter drives the right merchant's series, read back from a fresh registry
per test; the lease and replica gauges; what ``forget_merchant`` leaves behind."""

import random
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from support.clocks import FakeClock
from support.fakes import FakePlatform, FakeStore, make_context
from support.warehouse_samples import make_record

from recordsync import __version__
from recordsync.core.secret import Secret
from recordsync.core.state import Window, backfill_job
from recordsync.metrics import (
    MAX_UNKNOWN_FIELDS,
    MERCHANT_LABEL,
    OTHER_FIELDS_LABEL,
    PROCESS_WIDE,
    EventOutcome,
    MetricName,
    Metrics,
    RoundEventMetricName,
    VerifyMetricName,
    WakeVia,
    WriteOutcome,
    estimate_remaining_seconds,
    job_kind,
    record_verify_run,
    sequence_as_float,
)
from recordsync.platform.budget import RateBudget
from recordsync.platform.client import PlatformClient
from recordsync.platform.retry import RetryPolicy
from recordsync.service.daemon.observers import ClientMetricsObserver, SyncMetricsObserver
from recordsync.sync.events import MultiObserver, SyncObserver

START = 1_767_225_600.0  # 2026-01-01T00:00:00Z
MERCHANT = "m-1"
OTHER = "m-2"
WINDOW = Window(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC))


@pytest.fixture
def registry():
    return CollectorRegistry()


@pytest.fixture
def clock():
    return FakeClock(START)


@pytest.fixture
def metrics(registry, clock):
    return Metrics(registry, clock=clock)


@pytest.fixture
def merchant(metrics):
    """MERCHANT's view: what its observers feed."""
    return metrics.merchant(MERCHANT)


def value(registry, name, **labels):
    """A sample of MERCHANT unless another ``merchant_id`` is given (None: no such label)."""
    labels.setdefault(MERCHANT_LABEL, MERCHANT)
    if labels[MERCHANT_LABEL] is None:
        del labels[MERCHANT_LABEL]
    return registry.get_sample_value(name, labels)


# -- the platform client ------------------------------------------------------------------------


def test_client_observer_counts_requests_by_endpoint_status_and_code(metrics, merchant, registry):
    observer = ClientMetricsObserver(merchant)
    observer.on_response("records", 200, None, 0.2, "r-1")
    observer.on_response("records", 200, None, 0.3, "r-2")
    observer.on_response("record-changes", 429, "RATE_LIMITED", 0.01, "r-3")
    observer.on_response("record-changes", None, None, 30.0, None)  # no answer at all

    requests = MetricName.PLATFORM_REQUESTS
    assert value(registry, requests, endpoint="records", status="200", code="none") == 2
    assert (
        value(registry, requests, endpoint="record-changes", status="429", code="RATE_LIMITED") == 1
    )
    assert value(registry, requests, endpoint="record-changes", status="none", code="none") == 1
    duration = MetricName.PLATFORM_REQUEST_DURATION
    assert value(registry, f"{duration}_count", endpoint="records") == 2
    assert value(registry, f"{duration}_sum", endpoint="records") == pytest.approx(0.5)
    assert value(registry, f"{duration}_bucket", endpoint="records", le="0.25") == 1


def test_client_observer_counts_retries_by_reason_and_429s(metrics, merchant, registry):
    observer = ClientMetricsObserver(merchant)
    observer.on_retry("records", "transport_error", 0.5)
    observer.on_retry("records", "transport_error", 1.0)
    observer.on_retry("records", "rate_limited", 2.0)
    observer.on_rate_limited("records", 2.0)

    retries = MetricName.PLATFORM_RETRIES
    assert value(registry, retries, endpoint="records", reason="transport_error") == 2
    assert value(registry, retries, endpoint="records", reason="rate_limited") == 1
    assert value(registry, MetricName.PLATFORM_RATE_LIMITED, endpoint="records") == 1


def test_a_real_client_reports_a_429_and_its_retry(metrics, merchant, registry, clock):
    """The adapter satisfies the client's observer protocol, end to end over MockTransport."""
    answers = [
        httpx.Response(
            429,
            headers={"Retry-After": "2"},
            json={
                "error": {"code": "RATE_LIMITED", "message": "slow down", "retryable": True},
                "request_id": "r-429",
            },
        ),
        httpx.Response(
            200,
            json={
                "data": {"items": [], "next_cursor": "c-2", "has_more": False},
                "request_id": "r-ok",
            },
        ),
    ]
    budget = RateBudget(2, 1.0, clock=clock, sleep=clock.sleep)
    metrics.watch_budget(MERCHANT, budget)
    client = PlatformClient(
        base_url="https://platform.example",
        merchant_id="m-1",
        secret=Secret("not-a-real-secret"),
        budget=budget,
        transport=httpx.MockTransport(lambda _request: answers.pop(0)),
        clock=clock,
        sleep=clock.sleep,
        retry=RetryPolicy(),
        rng=random.Random(1),
        observer=ClientMetricsObserver(merchant),
    )
    with client:
        client.changes(cursor="c-1", limit=10)

    requests = MetricName.PLATFORM_REQUESTS
    endpoint = "record-changes"
    assert value(registry, requests, endpoint=endpoint, status="429", code="RATE_LIMITED") == 1
    assert value(registry, requests, endpoint=endpoint, status="200", code="none") == 1
    assert value(registry, MetricName.PLATFORM_RETRIES, endpoint=endpoint, reason="rate_limited")
    assert value(registry, MetricName.PLATFORM_RATE_LIMITED, endpoint=endpoint) == 1
    # The retry waited out Retry-After inside the shared budget.
    assert value(registry, MetricName.RATE_BUDGET_WAIT) == pytest.approx(2.0)


# -- the rate budget ----------------------------------------------------------------------------


def test_budget_size_and_wait_are_read_at_scrape_time(metrics, registry, clock):
    assert value(registry, MetricName.RATE_BUDGET_REQUESTS) is None  # nothing watched yet
    budget = RateBudget(2, 1.0, margin=0.0, clock=clock, sleep=clock.sleep)
    metrics.watch_budget(MERCHANT, budget)
    for _ in range(3):  # the third waits a full window
        budget.acquire().stamp()

    assert value(registry, MetricName.RATE_BUDGET_WAIT) == pytest.approx(1.0)
    assert value(registry, MetricName.RATE_BUDGET_REQUESTS) == 2
    assert value(registry, MetricName.RATE_BUDGET_WINDOW) == 1.0
    assert value(registry, MetricName.RATE_BUDGET_WAITING) == 0

    budget.resize(5, 2.0)  # the platform's capabilities changed the limits
    assert value(registry, MetricName.RATE_BUDGET_REQUESTS) == 5
    assert value(registry, MetricName.RATE_BUDGET_WINDOW) == 2.0


# -- pages, records and the warehouse -----------------------------------------------------------


def test_sync_observer_counts_pages_and_records_by_source(metrics, merchant, registry, clock):
    observer = SyncMetricsObserver(merchant)
    assert isinstance(observer, SyncObserver)
    observer.window_page("rebuild", WINDOW, 1000, done=False)
    clock.now += 5
    observer.window_page(backfill_job(WINDOW.start, WINDOW.end), WINDOW, 10, done=True)
    observer.tail_page(3, has_more=False, projection_as_of=None, last_sequence="7")

    pages = MetricName.PAGES_COMMITTED
    assert value(registry, pages, source="rebuild") == 1
    assert value(registry, pages, source="backfill") == 1
    assert value(registry, pages, source="tail") == 1
    assert value(registry, MetricName.RECORDS_WRITTEN, outcome="written") == 1013
    assert value(registry, MetricName.CHANGES_APPLIED) == 3
    assert value(registry, MetricName.LAST_COMMIT) == START + 5
    assert metrics.last_commit_at(MERCHANT) == START + 5


def test_page_committed_records_the_outcome_split_and_write_duration(metrics, merchant, registry):
    assert metrics.last_commit_at(MERCHANT) is None
    merchant.page_committed(
        "tail",
        10,
        0.04,
        outcomes={WriteOutcome.INSERTED: 6, WriteOutcome.UPDATED: 3, WriteOutcome.SKIPPED: 1},
    )
    merchant.observe_write(0.2)

    written = MetricName.RECORDS_WRITTEN
    assert value(registry, written, outcome="inserted") == 6
    assert value(registry, written, outcome="updated") == 3
    assert value(registry, written, outcome="skipped") == 1
    assert value(registry, written, outcome="written") is None
    duration = MetricName.WAREHOUSE_WRITE_DURATION
    assert value(registry, f"{duration}_count") == 2
    assert value(registry, f"{duration}_bucket", le="0.05") == 1
    assert metrics.last_commit_at(MERCHANT) == START


def test_quarantine_rebuilds_and_errors_are_counted(metrics, merchant, registry):
    observer = SyncMetricsObserver(merchant)
    observer.quarantined("tail", 2)
    observer.quarantined(backfill_job(WINDOW.start, WINDOW.end), 1)
    observer.rebuild_started("change cursor expired")
    observer.error("WarehouseUnavailableError")
    observer.error("WarehouseUnavailableError")
    observer.error("ProjectionLagError")

    assert value(registry, MetricName.RECORDS_QUARANTINED, source="tail") == 2
    assert value(registry, MetricName.RECORDS_QUARANTINED, source="backfill") == 1
    assert value(registry, MetricName.REBUILDS) == 1
    assert value(registry, MetricName.ERRORS, kind="WarehouseUnavailableError") == 2
    assert value(registry, MetricName.ERRORS, kind="ProjectionLagError") == 1


def test_observers_combine_through_multi_observer(metrics, merchant, registry):
    seen = []

    class Recorder(SyncObserver):
        def error(self, kind):
            seen.append(kind)

    MultiObserver(SyncMetricsObserver(merchant), Recorder()).error("ServerError")
    assert seen == ["ServerError"]
    assert value(registry, MetricName.ERRORS, kind="ServerError") == 1


# -- snapshot progress --------------------------------------------------------------------------


def test_snapshot_progress_and_remaining_time_follow_the_windows_done(
    metrics, merchant, registry, clock
):
    observer = SyncMetricsObserver(merchant)
    observer.windows_planned("rebuild", 10, 2)  # resumed: 2 of 10 done before this start
    assert value(registry, MetricName.SNAPSHOT_WINDOWS_TOTAL, kind="rebuild") == 10
    assert value(registry, MetricName.SNAPSHOT_WINDOWS_DONE, kind="rebuild") == 2
    assert value(registry, MetricName.SNAPSHOT_PROGRESS, kind="rebuild") == pytest.approx(0.2)
    assert value(registry, MetricName.SNAPSHOT_REMAINING, kind="rebuild") is None  # no rate yet

    for _ in range(2):
        clock.now += 30
        observer.window_page("rebuild", WINDOW, 500, done=False)
        observer.window_page("rebuild", WINDOW, 200, done=True)
    # 2 windows in 60 s here: 6 left take 180 s.
    assert value(registry, MetricName.SNAPSHOT_WINDOWS_DONE, kind="rebuild") == 4
    assert value(registry, MetricName.SNAPSHOT_PROGRESS, kind="rebuild") == pytest.approx(0.4)
    assert value(registry, MetricName.SNAPSHOT_REMAINING, kind="rebuild") == pytest.approx(180)

    clock.now += 60  # a stall: the estimate grows while nothing finishes
    assert value(registry, MetricName.SNAPSHOT_REMAINING, kind="rebuild") == pytest.approx(360)


def test_backfill_progress_is_labelled_by_kind_not_by_range(metrics, merchant, registry):
    observer = SyncMetricsObserver(merchant)
    job = backfill_job(WINDOW.start, WINDOW.end + timedelta(days=1))
    observer.windows_planned(job, 2, 0)
    observer.window_page(job, WINDOW, 1, done=True)
    observer.window_page(job, WINDOW, 1, done=True)

    assert value(registry, MetricName.SNAPSHOT_PROGRESS, kind="backfill") == 1.0
    assert value(registry, MetricName.SNAPSHOT_REMAINING, kind="backfill") == 0.0
    assert value(registry, MetricName.SNAPSHOT_WINDOWS_DONE, kind="rebuild") is None


@pytest.mark.parametrize(
    ("total", "done", "done_since_start", "elapsed", "expected"),
    [
        (10, 10, 0, 0.0, 0.0),
        (10, 3, 0, 100.0, None),
        (10, 3, 3, 0.0, None),
        (10, 4, 2, 60.0, 180.0),
        (10, 12, 12, 60.0, 0.0),
    ],
    ids=["done", "nothing-done-here-yet", "no-time-elapsed", "average-rate", "over-counted"],
)
def test_estimate_remaining_seconds(total, done, done_since_start, elapsed, expected):
    assert (
        estimate_remaining_seconds(
            total=total, done=done, done_since_start=done_since_start, elapsed=elapsed
        )
        == expected
    )


# -- the tail -----------------------------------------------------------------------------------


def test_tail_freshness_is_computed_at_scrape_time(metrics, merchant, registry, clock):
    observer = SyncMetricsObserver(merchant)
    assert value(registry, MetricName.TAIL_FRESHNESS) is None
    as_of = datetime.fromtimestamp(START - 4, tz=UTC)
    observer.tail_page(5, has_more=True, projection_as_of=as_of, last_sequence="100")
    assert value(registry, MetricName.TAIL_FRESHNESS) == pytest.approx(4)
    assert value(registry, MetricName.TAIL_HAS_MORE) == 1
    assert value(registry, MetricName.TAIL_LAST_SEQUENCE) == 100

    clock.now += 10
    assert value(registry, MetricName.TAIL_FRESHNESS) == pytest.approx(14)

    # An empty page keeps the last sequence and clears the backlog flag.
    observer.tail_page(0, has_more=False, projection_as_of=None, last_sequence=None)
    assert value(registry, MetricName.TAIL_HAS_MORE) == 0
    assert value(registry, MetricName.TAIL_LAST_SEQUENCE) == 100
    assert value(registry, MetricName.TAIL_FRESHNESS) == pytest.approx(14)


@pytest.mark.parametrize(
    ("sequence", "expected"),
    [
        ("42", 42.0),
        ("18446744073709551617", 1.8446744073709552e19),  # beyond 64 bits: rounded
        ("9" * 400, float("inf")),
    ],
    ids=["small", "beyond-64-bits", "beyond-float"],
)
def test_sequence_gauge_is_a_float_approximation(sequence, expected):
    assert sequence_as_float(sequence) == expected


# -- names and the registry ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "kind"),
    [("tail", "tail"), ("rebuild", "rebuild"), ("backfill:2026-01-01/2026-01-02", "backfill")],
    ids=["tail", "rebuild", "backfill"],
)
def test_job_kind_is_a_bounded_label(job, kind):
    assert job_kind(job) == kind


def test_build_info_carries_the_version(registry):
    Metrics(registry)
    assert value(registry, MetricName.BUILD_INFO, merchant_id=None, version=__version__) == 1


def test_drift_check_reports_rows_behind(metrics, merchant, registry):
    merchant.drift_checked(3)
    assert value(registry, MetricName.DRIFT_CHECKS) == 1
    assert value(registry, MetricName.DRIFT_ROWS_BEHIND) == 3


def test_the_drift_checks_age_counts_from_its_last_run_and_its_deferrals_are_counted(
    merchant, registry, clock
):
    """Issue 38: a drift check starved on the periodic pool is seen: its age passes twice its
    interval while its deferrals grow, and a run that ends (or finds nothing to compare)
    brings the age back to 0."""
    observer = SyncMetricsObserver(merchant)
    assert value(registry, MetricName.DRIFT_CHECK_AGE) is None  # not scheduled here
    assert value(registry, MetricName.DRIFT_CHECK_DEFERRALS) == 0
    observer.drift_check_scheduled(60.0)
    clock.now += 50
    assert value(registry, MetricName.DRIFT_CHECK_AGE) == 50
    assert value(registry, MetricName.DRIFT_CHECK_INTERVAL) == 60
    for _ in range(3):
        observer.drift_check_deferred("the rate budget is taken by the sync")
        clock.now += 40
    assert value(registry, MetricName.DRIFT_CHECK_AGE) == 170  # past twice the interval
    assert value(registry, MetricName.DRIFT_CHECK_DEFERRALS) == 3
    observer.drift_checked(WINDOW, 0)
    observer.drift_check_ran()
    clock.now += 5
    assert value(registry, MetricName.DRIFT_CHECK_AGE) == 5
    assert value(registry, MetricName.DRIFT_CHECK_DEFERRALS) == 3


def test_the_tails_wait_is_a_gauge_per_merchant(metrics, merchant, registry):
    SyncMetricsObserver(merchant).tail_interval(8.0)
    value = registry.get_sample_value("recordsync_tail_wait_seconds", {"merchant_id": MERCHANT})
    assert value == 8.0


def test_every_named_metric_is_exposed_with_conventional_names(metrics, merchant, registry, clock):
    metrics.watch_budget(MERCHANT, RateBudget(2, 1.0, clock=clock, sleep=clock.sleep))
    observer = SyncMetricsObserver(merchant)
    observer.windows_planned("rebuild", 2, 1)
    clock.now += 1
    observer.window_page("rebuild", WINDOW, 1, done=True)
    observer.tail_page(
        1, has_more=False, projection_as_of=datetime.fromtimestamp(START, UTC), last_sequence="1"
    )
    observer.tail_interval(4.0)
    observer.drift_check_scheduled(60.0)
    observer.quarantined("tail", 1)
    observer.unknown_fields({"tax": 1})
    observer.rebuild_started("x")
    observer.error("ServerError")
    client = ClientMetricsObserver(merchant)
    client.on_response("records", 200, None, 0.1, None)
    client.on_retry("records", "server_error", 0.1)
    client.on_rate_limited("records", 1.0)
    merchant.observe_write(0.1)
    merchant.drift_checked(0)
    merchant.sync_failed("RuntimeError")
    merchant.catalogue_available(available=False)
    metrics.set_lease_held(MERCHANT, held=True)
    metrics.set_replicas_live(2)
    metrics.set_paused(MERCHANT, paused=False)

    families = {family.name: family for family in registry.collect()}
    exposed = {sample.name for family in families.values() for sample in family.samples}
    for name in MetricName:
        assert name.startswith("recordsync_")
        assert name in exposed or f"{name}_count" in exposed, name
    for family in families.values():
        if family.type == "counter":
            assert f"{family.name}_total" in {*MetricName, *RoundEventMetricName}
        else:
            assert not family.name.endswith("_total"), family.name
    text = generate_latest(registry).decode()
    assert "recordsync_platform_requests_total{" in text
    assert "recordsync_snapshot_remaining_seconds{" in text


def scraped_name(family):
    """The name a family is scraped as (client_python drops a counter's ``_total``)."""
    return f"{family.name}_total" if family.type == "counter" else family.name


def test_every_series_the_daemon_serves_is_named_in_the_names_module():
    """A series registered anywhere in the package under a name of its own would be missed
    by the dashboards and alerts, which are checked against the names' enums."""
    metrics = Metrics()
    feed(metrics, MERCHANT, 1, FakeClock(START))
    metrics.round_events.set_missing(MERCHANT, 1)
    scraped = {scraped_name(family) for family in metrics.registry.collect()}
    assert scraped == {*MetricName, *RoundEventMetricName}


def test_every_series_of_a_verify_run_is_named_in_the_names_module():
    registry = CollectorRegistry()
    record_verify_run(registry, MERCHANT, clean=True, differences={"missing": 0}, repaired=0)
    assert {scraped_name(family) for family in registry.collect()} == set(VerifyMetricName)


def test_metrics_use_a_fresh_registry_by_default_never_the_global_one():
    first, second = Metrics(), Metrics()  # would raise "Duplicated timeseries" if shared
    assert first.registry is not second.registry
    assert REGISTRY.get_sample_value(MetricName.BUILD_INFO, {"version": __version__}) is None


# -- several merchants in one process -----------------------------------------------------------

# Scraped at START + 70: MERCHANT was fed at START (its pages at START + 10), OTHER at START + 60
# (its pages at START + 70), each quantity scaled by 1 for MERCHANT and 2 for OTHER.
PER_MERCHANT = [
    (MetricName.PLATFORM_REQUESTS, {"endpoint": "records", "status": "200", "code": "none"}, 1, 2),
    (f"{MetricName.PLATFORM_REQUEST_DURATION}_count", {"endpoint": "records"}, 1, 2),
    (MetricName.PLATFORM_RETRIES, {"endpoint": "records", "reason": "server_error"}, 1, 2),
    (MetricName.PLATFORM_RATE_LIMITED, {"endpoint": "records"}, 1, 2),
    (MetricName.RATE_BUDGET_WAIT, {}, 1.0, 2.0),
    (MetricName.RATE_BUDGET_REQUESTS, {}, 2, 4),
    (MetricName.RATE_BUDGET_WINDOW, {}, 1.0, 2.0),
    (MetricName.RATE_BUDGET_WAITING, {}, 0, 0),
    (MetricName.RECORDS_WRITTEN, {"outcome": "written"}, 107, 214),
    (MetricName.CHANGES_APPLIED, {}, 7, 14),
    (MetricName.PAGES_COMMITTED, {"source": "rebuild"}, 1, 2),
    (MetricName.RECORDS_QUARANTINED, {"source": "tail"}, 1, 2),
    (MetricName.RECORD_FIELDS_UNKNOWN, {"field": "tax"}, 3, 6),
    (f"{MetricName.WAREHOUSE_WRITE_DURATION}_count", {}, 1, 2),
    (MetricName.LAST_COMMIT, {}, START + 10, START + 70),
    (MetricName.SNAPSHOT_WINDOWS_TOTAL, {"kind": "rebuild"}, 10, 15),
    (MetricName.SNAPSHOT_WINDOWS_DONE, {"kind": "rebuild"}, 1, 2),
    (MetricName.SNAPSHOT_PROGRESS, {"kind": "rebuild"}, 1 / 10, 2 / 15),
    (MetricName.SNAPSHOT_REMAINING, {"kind": "rebuild"}, 9 * 70 / 1, 13 * 10 / 2),
    (MetricName.TAIL_FRESHNESS, {}, 74, 78),
    (MetricName.TAIL_HAS_MORE, {}, 0, 1),
    (MetricName.TAIL_WAIT, {}, 5.0, 10.0),
    (MetricName.TAIL_LAST_SEQUENCE, {}, 1000, 2000),
    (MetricName.REBUILDS, {}, 1, 2),
    (MetricName.ERRORS, {"kind": "ServerError"}, 1, 2),
    (MetricName.DRIFT_CHECKS, {}, 1, 2),
    (MetricName.DRIFT_ROWS_BEHIND, {}, 1, 2),
    (MetricName.DRIFT_CHECK_AGE, {}, 70, 10),
    (MetricName.DRIFT_CHECK_INTERVAL, {}, 3600, 7200),
    (MetricName.DRIFT_CHECK_DEFERRALS, {}, 1, 2),
    (MetricName.REVISIONS_PRUNED, {}, 3, 6),
    (MetricName.SYNC_FAILURES, {"kind": "RuntimeError"}, 1, 2),
    (MetricName.CATALOGUE_REFRESHES, {}, 1, 2),
    (MetricName.CATALOGUE_AVAILABLE, {}, 1, 0),
    (MetricName.LEASE_HELD, {}, 1, 0),
    (MetricName.MERCHANT_PAUSED, {}, 0, 1),
]
# What a merchant handed to another replica leaves behind: its counters, and a lease of 0.
GONE_WHEN_FORGOTTEN = frozenset(
    {
        MetricName.RATE_BUDGET_WAIT,
        MetricName.RATE_BUDGET_REQUESTS,
        MetricName.RATE_BUDGET_WINDOW,
        MetricName.RATE_BUDGET_WAITING,
        MetricName.LAST_COMMIT,
        MetricName.SNAPSHOT_WINDOWS_TOTAL,
        MetricName.SNAPSHOT_WINDOWS_DONE,
        MetricName.SNAPSHOT_PROGRESS,
        MetricName.SNAPSHOT_REMAINING,
        MetricName.TAIL_FRESHNESS,
        MetricName.TAIL_HAS_MORE,
        MetricName.TAIL_WAIT,
        MetricName.TAIL_LAST_SEQUENCE,
        MetricName.DRIFT_ROWS_BEHIND,
        MetricName.DRIFT_CHECK_AGE,
        MetricName.DRIFT_CHECK_INTERVAL,
        MetricName.CATALOGUE_AVAILABLE,
    }
)


def feed(metrics, merchant_id, n, clock):
    """Everything a merchant's client and sync report, each quantity scaled by ``n``."""
    view = metrics.merchant(merchant_id)
    budget_clock = FakeClock(START)  # the budget's own waits must not move the metrics' clock
    budget = RateBudget(2 * n, float(n), margin=0.0, clock=budget_clock, sleep=budget_clock.sleep)
    metrics.watch_budget(merchant_id, budget)
    for _ in range(2 * n + 1):  # the last one waits a full window: n seconds
        budget.acquire().stamp()
    client, sync = ClientMetricsObserver(view), SyncMetricsObserver(view)
    sync.drift_check_scheduled(3600.0 * n)
    sync.windows_planned("rebuild", 5 + 5 * n, 0)
    clock.now += 10
    for _ in range(n):
        client.on_response("records", 200, None, 0.1, None)
        client.on_retry("records", "server_error", 0.1)
        client.on_rate_limited("records", 1.0)
        sync.window_page("rebuild", WINDOW, 100, done=True)
        sync.quarantined("tail", 1)
        sync.unknown_fields({"tax": 3})
        sync.page_written("tail", 0.01)
        sync.rebuild_started("change cursor expired")
        sync.error("ServerError")
        sync.drift_checked(WINDOW, n)
        sync.drift_check_deferred("the rate budget is taken by the sync")
        sync.revisions_pruned(3)
        view.sync_failed("RuntimeError")
        sync.catalogue_refreshed(24, 0.5)
    sync.catalogue_available(available=n == 1)
    sync.tail_page(
        7 * n,
        has_more=n > 1,
        projection_as_of=datetime.fromtimestamp(START - 4 * n, UTC),
        last_sequence=str(1000 * n),
    )
    sync.tail_interval(5.0 * n)
    metrics.set_lease_held(merchant_id, held=n == 1)
    metrics.set_paused(merchant_id, paused=n != 1)


@pytest.fixture
def two_merchants(metrics, registry, clock):
    feed(metrics, MERCHANT, 1, clock)
    clock.now += 50
    feed(metrics, OTHER, 2, clock)
    return metrics


@pytest.mark.parametrize(
    ("name", "labels", "mine", "other"), PER_MERCHANT, ids=[str(row[0]) for row in PER_MERCHANT]
)
def test_each_merchant_has_its_own_series(two_merchants, name, labels, mine, other):
    registry = two_merchants.registry
    assert value(registry, name, **labels) == pytest.approx(mine)
    assert value(registry, name, merchant_id=OTHER, **labels) == pytest.approx(other)


def test_every_series_but_the_process_wide_ones_carries_merchant_id(two_merchants, registry):
    two_merchants.set_replicas_live(2)
    named = {str(row[0]).removesuffix("_count") for row in PER_MERCHANT}
    assert named == {str(name) for name in MetricName} - PROCESS_WIDE
    merchants = set()
    for family in registry.collect():
        for sample in family.samples:
            if family.name in PROCESS_WIDE:
                assert MERCHANT_LABEL not in sample.labels, sample
            else:
                merchants.add(sample.labels[MERCHANT_LABEL])
    assert merchants == {MERCHANT, OTHER}


def test_two_budgets_watched_at_once_are_read_each_on_its_own(metrics, registry):
    clocks = {MERCHANT: FakeClock(START), OTHER: FakeClock(START)}
    budgets = {
        merchant_id: RateBudget(2, 1.0, margin=0.0, clock=clock, sleep=clock.sleep)
        for merchant_id, clock in clocks.items()
    }
    for merchant_id, budget in budgets.items():
        metrics.watch_budget(merchant_id, budget)
    for _ in range(3):  # MERCHANT's third request waits a full window; OTHER sends nothing
        budgets[MERCHANT].acquire().stamp()
    budgets[OTHER].resize(10, 2.0)  # OTHER's capabilities differ

    assert value(registry, MetricName.RATE_BUDGET_WAIT) == pytest.approx(1.0)
    assert value(registry, MetricName.RATE_BUDGET_WAIT, merchant_id=OTHER) == 0
    assert value(registry, MetricName.RATE_BUDGET_REQUESTS) == 2
    assert value(registry, MetricName.RATE_BUDGET_REQUESTS, merchant_id=OTHER) == 10
    assert value(registry, MetricName.RATE_BUDGET_WINDOW, merchant_id=OTHER) == 2.0


def test_forget_merchant_removes_its_gauges_keeps_its_counters_and_reads_its_lease_as_0(
    two_merchants, registry
):
    two_merchants.forget_merchant(MERCHANT)

    for name, labels, mine, other in PER_MERCHANT:
        if name in GONE_WHEN_FORGOTTEN:
            assert value(registry, name, **labels) is None, name
        elif name == MetricName.LEASE_HELD:
            assert value(registry, name, **labels) == 0
        else:  # counters and histograms: what this process did
            assert value(registry, name, **labels) == pytest.approx(mine), name
        assert value(registry, name, merchant_id=OTHER, **labels) == pytest.approx(other), name
    assert two_merchants.last_commit_at(MERCHANT) is None
    assert value(registry, MetricName.MERCHANTS_HELD, merchant_id=None) == 0


def test_a_report_after_forget_brings_the_merchants_gauges_back(metrics, merchant, registry):
    merchant.drift_checked(3)
    metrics.forget_merchant(MERCHANT)
    merchant.page_committed("tail", 1)  # the same view: the merchant came back

    assert value(registry, MetricName.LAST_COMMIT) == START
    assert value(registry, MetricName.DRIFT_ROWS_BEHIND) is None  # not checked since
    assert value(registry, MetricName.DRIFT_CHECKS) == 1


def test_last_commit_at_is_per_merchant(metrics):
    metrics.merchant(OTHER).page_committed("tail", 0)
    assert metrics.last_commit_at(OTHER) == START
    assert metrics.last_commit_at(MERCHANT) is None


# -- leases and replicas ------------------------------------------------------------------------


def test_lease_gauges_and_the_merchants_held_follow_set_lease_held(metrics, registry):
    assert value(registry, MetricName.MERCHANTS_HELD, merchant_id=None) == 0
    for merchant_id, held in (("m-a", True), ("m-b", True), ("m-c", False)):
        metrics.set_lease_held(merchant_id, held=held)
    leases = {
        m: value(registry, MetricName.LEASE_HELD, merchant_id=m) for m in ("m-a", "m-b", "m-c")
    }
    assert leases == {"m-a": 1, "m-b": 1, "m-c": 0}
    assert value(registry, MetricName.MERCHANTS_HELD, merchant_id=None) == 2

    metrics.set_lease_held("m-b", held=False)  # released
    metrics.forget_merchant("m-a")  # handed over
    assert value(registry, MetricName.LEASE_HELD, merchant_id="m-a") == 0
    assert value(registry, MetricName.LEASE_HELD, merchant_id="m-b") == 0
    assert value(registry, MetricName.MERCHANTS_HELD, merchant_id=None) == 0


def test_a_merchant_held_shows_last_commit_0_until_its_first_page(metrics, merchant, registry):
    metrics.set_lease_held(MERCHANT, held=False)
    assert value(registry, MetricName.LAST_COMMIT) is None  # a standby reports nothing
    metrics.set_lease_held(MERCHANT, held=True)
    assert value(registry, MetricName.LAST_COMMIT) == 0  # held, stuck before its first page?
    merchant.page_committed("tail", 0)
    assert value(registry, MetricName.LAST_COMMIT) == START


def test_replicas_live_is_absent_until_the_fleet_reports(metrics, registry):
    assert value(registry, MetricName.REPLICAS_LIVE, merchant_id=None) is None
    metrics.set_replicas_live(3)
    assert value(registry, MetricName.REPLICAS_LIVE, merchant_id=None) == 3
    with pytest.raises(ValueError, match="negative"):
        metrics.set_replicas_live(-1)


@pytest.mark.parametrize(
    "call",
    [
        lambda metrics: metrics.merchant(""),
        lambda metrics: metrics.watch_budget("", RateBudget(1, 1.0)),
        lambda metrics: metrics.set_lease_held("", held=True),
    ],
    ids=["merchant", "watch_budget", "set_lease_held"],
)
def test_an_empty_merchant_id_is_refused(metrics, registry, call):
    with pytest.raises(ValueError, match="merchant_id"):
        call(metrics)
    assert value(registry, MetricName.LEASE_HELD, merchant_id="") is None


def test_a_merchants_counters_without_other_labels_start_at_0(metrics, registry):
    metrics.merchant(MERCHANT)  # so increase() sees the first rebuild as one
    for name in (MetricName.REBUILDS, MetricName.DRIFT_CHECKS, MetricName.CHANGES_APPLIED):
        assert value(registry, name) == 0, name
    assert value(registry, f"{MetricName.WAREHOUSE_WRITE_DURATION}_count") == 0
    assert value(registry, MetricName.ERRORS, kind="ServerError") is None  # not known ahead


# -- round-end notifications ---------------------------------------------------------


def test_round_events_are_counted_by_outcome_and_code_with_their_reply_time(metrics, registry):
    events = metrics.round_events
    events.received(MERCHANT, EventOutcome.ACCEPTED, None, 0.002)
    events.received(MERCHANT, EventOutcome.DUPLICATE, None, 0.001)
    events.received(None, EventOutcome.REFUSED, "AUTHENTICATION_FAILED", 0.0005)
    events.woke(MERCHANT, WakeVia.LOCAL)
    events.woke(MERCHANT, WakeVia.WAREHOUSE)
    name = RoundEventMetricName.EVENTS
    assert value(registry, name, outcome="accepted", code="none") == 1
    assert value(registry, name, outcome="duplicate", code="none") == 1
    stranger = {"merchant_id": "none", "outcome": "refused", "code": "AUTHENTICATION_FAILED"}
    assert registry.get_sample_value(name, stranger) == 1
    duration = f"{RoundEventMetricName.REPLY_DURATION}_count"
    assert value(registry, duration) == 2
    for via in ("local", "warehouse"):
        assert value(registry, RoundEventMetricName.WAKEUPS, via=via) == 1


def test_rounds_announced_missing_is_set_per_merchant_and_goes_with_the_merchant(metrics, registry):
    metrics.round_events.set_missing(MERCHANT, 3)
    metrics.round_events.set_missing(OTHER, 0)
    assert value(registry, RoundEventMetricName.ROUNDS_ANNOUNCED_MISSING) == 3
    metrics.forget_merchant(MERCHANT)
    assert value(registry, RoundEventMetricName.ROUNDS_ANNOUNCED_MISSING) is None
    assert value(registry, RoundEventMetricName.ROUNDS_ANNOUNCED_MISSING, merchant_id=OTHER) == 0


def test_a_lease_not_confirmed_shows_as_not_held_at_once(metrics, registry):
    """Issue 30: a replica cut off from the database reports 0 before anyone else could hold
    the merchant, not after its next fleet tick."""
    confirmed = {"m-a": True, "m-b": True}
    metrics.watch_leases(lambda merchant_id: confirmed.get(merchant_id, False))
    for merchant_id in confirmed:
        metrics.set_lease_held(merchant_id, held=True)
    assert value(registry, MetricName.LEASE_HELD, merchant_id="m-a") == 1
    confirmed["m-a"] = False  # the keeper could not confirm it: nothing changed in the book
    assert value(registry, MetricName.LEASE_HELD, merchant_id="m-a") == 0
    assert value(registry, MetricName.LEASE_HELD, merchant_id="m-b") == 1
    assert value(registry, MetricName.MERCHANTS_HELD, merchant_id=None) == 1


def test_rows_carrying_unknown_record_members_are_counted_by_member(merchant, registry):
    ctx = make_context(FakePlatform(), FakeStore(), observer=SyncMetricsObserver(merchant))
    page = [
        make_record("r1", extra_fields='{"tax":1,"channel":"web"}'),
        make_record("r2", extra_fields='{"tax":2}'),
        make_record("r3"),
    ]
    ctx.after_commit("snapshot", page, [], "req-1")
    ctx.after_commit("tail", page[1:], [], "req-2")
    assert value(registry, MetricName.RECORD_FIELDS_UNKNOWN, field="tax") == 3
    assert value(registry, MetricName.RECORD_FIELDS_UNKNOWN, field="channel") == 1


def test_unknown_member_names_past_the_cap_share_one_label(merchant, registry):
    observer = SyncMetricsObserver(merchant)
    observer.unknown_fields({f"f{n}": 1 for n in range(MAX_UNKNOWN_FIELDS + 5)})
    assert value(registry, MetricName.RECORD_FIELDS_UNKNOWN, field="f0") == 1
    assert value(registry, MetricName.RECORD_FIELDS_UNKNOWN, field=OTHER_FIELDS_LABEL) == 5
