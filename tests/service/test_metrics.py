"""Metrics: each adapter drives the right series, read back from a fresh registry per test."""

import random
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from recordsync import __version__
from recordsync.core.secret import Secret
from recordsync.core.state import Window, backfill_job
from recordsync.metrics import (
    MetricName,
    Metrics,
    WriteOutcome,
    estimate_remaining_seconds,
    job_kind,
    sequence_as_float,
)
from recordsync.platform.budget import RateBudget
from recordsync.platform.client import PlatformClient
from recordsync.platform.retry import RetryPolicy
from recordsync.service.observers import ClientMetricsObserver, SyncMetricsObserver
from recordsync.sync.events import MultiObserver, SyncObserver

START = 1_767_225_600.0  # 2026-01-01T00:00:00Z
WINDOW = Window(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC))


class Clock:
    def __init__(self, now=START):
        self.now = now

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


@pytest.fixture
def registry():
    return CollectorRegistry()


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def metrics(registry, clock):
    return Metrics(registry, clock=clock)


def value(registry, name, **labels):
    return registry.get_sample_value(name, labels)


# -- the platform client ------------------------------------------------------------------------


def test_client_observer_counts_requests_by_endpoint_status_and_code(metrics, registry):
    observer = ClientMetricsObserver(metrics)
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


def test_client_observer_counts_retries_by_reason_and_429s(metrics, registry):
    observer = ClientMetricsObserver(metrics)
    observer.on_retry("records", "transport_error", 0.5)
    observer.on_retry("records", "transport_error", 1.0)
    observer.on_retry("records", "rate_limited", 2.0)
    observer.on_rate_limited("records", 2.0)

    retries = MetricName.PLATFORM_RETRIES
    assert value(registry, retries, endpoint="records", reason="transport_error") == 2
    assert value(registry, retries, endpoint="records", reason="rate_limited") == 1
    assert value(registry, MetricName.PLATFORM_RATE_LIMITED, endpoint="records") == 1


def test_a_real_client_reports_a_429_and_its_retry(metrics, registry, clock):
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
    metrics.watch_budget(budget)
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
        observer=ClientMetricsObserver(metrics),
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
    metrics.watch_budget(budget)
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


def test_sync_observer_counts_pages_and_records_by_source(metrics, registry, clock):
    observer = SyncMetricsObserver(metrics)
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
    assert metrics.last_commit_at == START + 5


def test_page_committed_records_the_outcome_split_and_write_duration(metrics, registry):
    assert metrics.last_commit_at is None
    metrics.page_committed(
        "tail",
        10,
        0.04,
        outcomes={WriteOutcome.INSERTED: 6, WriteOutcome.UPDATED: 3, WriteOutcome.SKIPPED: 1},
    )
    metrics.observe_write(0.2)

    written = MetricName.RECORDS_WRITTEN
    assert value(registry, written, outcome="inserted") == 6
    assert value(registry, written, outcome="updated") == 3
    assert value(registry, written, outcome="skipped") == 1
    assert value(registry, written, outcome="written") is None
    duration = MetricName.WAREHOUSE_WRITE_DURATION
    assert value(registry, f"{duration}_count") == 2
    assert value(registry, f"{duration}_bucket", le="0.05") == 1
    assert metrics.last_commit_at == START


def test_quarantine_rebuilds_and_errors_are_counted(metrics, registry):
    observer = SyncMetricsObserver(metrics)
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


def test_observers_combine_through_multi_observer(metrics, registry):
    seen = []

    class Recorder(SyncObserver):
        def error(self, kind):
            seen.append(kind)

    MultiObserver(SyncMetricsObserver(metrics), Recorder()).error("ServerError")
    assert seen == ["ServerError"]
    assert value(registry, MetricName.ERRORS, kind="ServerError") == 1


# -- snapshot progress --------------------------------------------------------------------------


def test_snapshot_progress_and_remaining_time_follow_the_windows_done(metrics, registry, clock):
    observer = SyncMetricsObserver(metrics)
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


def test_backfill_progress_is_labelled_by_kind_not_by_range(metrics, registry):
    observer = SyncMetricsObserver(metrics)
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


def test_tail_freshness_is_computed_at_scrape_time(metrics, registry, clock):
    observer = SyncMetricsObserver(metrics)
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
    assert value(registry, MetricName.BUILD_INFO, version=__version__) == 1


def test_drift_check_reports_rows_behind(metrics, registry):
    metrics.drift_checked(3)
    assert value(registry, MetricName.DRIFT_CHECKS) == 1
    assert value(registry, MetricName.DRIFT_ROWS_BEHIND) == 3


def test_every_named_metric_is_exposed_with_conventional_names(metrics, registry, clock):
    metrics.watch_budget(RateBudget(2, 1.0, clock=clock, sleep=clock.sleep))
    observer = SyncMetricsObserver(metrics)
    observer.windows_planned("rebuild", 2, 1)
    clock.now += 1
    observer.window_page("rebuild", WINDOW, 1, done=True)
    observer.tail_page(
        1, has_more=False, projection_as_of=datetime.fromtimestamp(START, UTC), last_sequence="1"
    )
    observer.quarantined("tail", 1)
    observer.rebuild_started("x")
    observer.error("ServerError")
    client = ClientMetricsObserver(metrics)
    client.on_response("records", 200, None, 0.1, None)
    client.on_retry("records", "server_error", 0.1)
    client.on_rate_limited("records", 1.0)
    metrics.observe_write(0.1)
    metrics.drift_checked(0)

    families = {family.name: family for family in registry.collect()}
    exposed = {sample.name for family in families.values() for sample in family.samples}
    for name in MetricName:
        assert name.startswith("recordsync_")
        assert name in exposed or f"{name}_count" in exposed, name
    for family in families.values():
        if family.type == "counter":
            assert f"{family.name}_total" in MetricName.__members__.values()
        else:
            assert not family.name.endswith("_total"), family.name
    text = generate_latest(registry).decode()
    assert "recordsync_platform_requests_total{" in text
    assert "recordsync_snapshot_remaining_seconds{" in text


def test_metrics_use_a_fresh_registry_by_default_never_the_global_one():
    first, second = Metrics(), Metrics()  # would raise "Duplicated timeseries" if shared
    assert first.registry is not second.registry
    assert REGISTRY.get_sample_value(MetricName.BUILD_INFO, {"version": __version__}) is None
