"""Backfills never take the periodic pool: nine merchants backfilling in
one process whose checks share eight periodic threads, and every merchant's cross-check,
catalogue refresh and drift check still run on time.

A drift check asks the rate budget at the lowest priority, behind the snapshot's chains that
keep the budget full; it queued there, on a periodic thread, for the whole backfill, and nine
of them held all eight threads, so every check of every merchant stopped.  Now it is deferred
and its thread given back, and it goes ahead of the chains once deferred a window
(``platform.budget``).  The holder is this process's daemon assembly (``MerchantSyncs``) over
one simulator; the backfills are handed over as ``recordsync backfill`` hands them.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from support.dbfixtures import fresh_database

from recordsync.core.secret import Secret, SecretSource
from recordsync.core.settings import MerchantSettings, Settings
from recordsync.core.state import Phase, Window, backfill_job
from recordsync.core.stopping import Stopper
from recordsync.core.times import floor_ms
from recordsync.metrics import MERCHANT_LABEL, MetricName, Metrics
from recordsync.service.daemon.merchant_syncs import MerchantSyncs
from recordsync.service.secrets import SecretKeeper
from recordsync.sim import SimConfig, Simulator
from recordsync.sync.events import SyncObserver
from recordsync.sync.jobs import JobHost
from recordsync.warehouse import RequestKind, RequestState, Warehouse

pytestmark = pytest.mark.slow

MERCHANTS = 9
PERIODIC_THREADS = 8
RATE = 4  # record requests a second per merchant: the backfills keep each budget full
PAGE = 25
RECORDS = 6000  # per merchant: far more than the window below reads at RATE
DRIFT = 3.0  # seconds between drift checks
CATALOGUE = 2.0
GRACE = 4.0  # the cross-check runs every GRACE / 4 seconds
CROSS_CHECK = GRACE / 4
WINDOW = 18.0  # seconds observed while every backfill reads
# What this test catches is a check that stops for the whole window; a run that overlaps its
# next tick loses that tick (APScheduler runs one instance of a job), and on 2 cores busy with
# nine backfills and two other test workers a check's query waits a second or so for its turn.
SLACK = 2.0


class Checks(SyncObserver):
    """When each periodic check of one merchant ended, on the monotonic clock."""

    def __init__(self, merchant: str, seen: dict[tuple[str, str], list[float]]) -> None:
        self._merchant = merchant
        self._seen = seen

    def _ran(self, kind: str) -> None:
        self._seen[(kind, self._merchant)].append(time.monotonic())

    def drift_checked(self, window: Window, rows_behind: int) -> None:
        self._ran("drift")

    def catalogue_refreshed(self, games: int, seconds: float) -> None:
        self._ran("catalogue")

    def rounds_checked(self, missing: int) -> None:
        self._ran("cross-check")


def history_days() -> float:
    """The simulator's history starts after the last UTC midnight, so that the drift check's
    last closed day holds none of it: a check is one page, however the day falls."""
    now = datetime.now(UTC)
    since_midnight = (now - now.replace(hour=0, minute=0, second=0, microsecond=0)).seconds
    if since_midnight < 90:
        time.sleep(90 - since_midnight)
        since_midnight = 90
    return min(0.05, (since_midnight - 60) / 86400)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    days = history_days()
    config = SimConfig(
        merchant_id="m-pool",
        seed=38,
        history_days=days,
        rounds_per_day=int(RECORDS / days),
        record_requests=RATE,
        record_seconds=1,
    ).with_merchants(MERCHANTS)
    simulator = Simulator(config)
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] without a run."""
    marks = [start, *(t for t in times if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(marks))


def test_nine_backfills_leave_every_merchants_checks_on_time(sim, tmp_path):
    now = floor_ms(sim.now())
    with fresh_database("postgres", tmp_path, migrated=True) as url:
        settings = Settings(
            merchants=tuple(
                MerchantSettings(
                    profile.merchant_id,
                    SecretSource.given(Secret(profile.secret)),
                    sim.base_url,
                    now - timedelta(minutes=1),  # the rebuild: a few pages, then the tail
                )
                for profile in sim.config.profiles
            ),
            database_url=url,
            page_size=PAGE,
            poll_interval=0.2,
            poll_ceiling=1.6,
            snapshot_concurrency=2,
            drift_check_interval=DRIFT,
            catalogue_interval=CATALOGUE,
            events_port=1,  # notifications received (nothing listens here): cross-checks run
            event_grace=GRACE,
            http_timeout=5.0,
        )
        warehouse = Warehouse.connect(url)
        session = warehouse.fleet_session("holder", lease_seconds=120)
        seen: dict[tuple[str, str], list[float]] = defaultdict(list)
        lock = threading.Lock()

        def observer(merchant: str) -> SyncObserver:
            with lock:
                return Checks(merchant, seen)

        stopper = Stopper()
        metrics = Metrics()
        host = JobHost(periodic_threads=PERIODIC_THREADS, worker_threads=16)
        syncs = MerchantSyncs(
            settings,
            warehouse=warehouse,
            secrets=SecretKeeper.from_settings(settings),
            metrics=metrics,
            host=host,
            stopper=stopper,
            replica_id="holder",
            extra_observer=observer,
            request_poll=0.05,
        )
        merchants = list(sim.merchant_ids)
        try:
            for merchant in merchants:
                epoch = session.try_hold(merchant)
                assert epoch is not None
                syncs.start(merchant, epoch)
            wait_for(
                lambda: all(
                    (state := warehouse.state.load_state(merchant)) is not None
                    and state.phase is Phase.TAILING
                    for merchant in merchants
                )
            )
            start, end = now - timedelta(days=1), now - timedelta(minutes=1)
            requests = [
                warehouse.requests.ask(
                    merchant, RequestKind.BACKFILL, start, end, key=backfill_job(start, end)
                )
                for merchant in merchants
            ]
            wait_for(lambda: all(_state(warehouse, r) is RequestState.RUNNING for r in requests))
            time.sleep(2 * DRIFT)  # every drift check now meets a full budget
            began = time.monotonic()
            ages = dict.fromkeys(merchants, 0.0)
            while time.monotonic() < began + WINDOW:  # the drift check's age, as scraped
                for merchant in merchants:
                    age = _sample(metrics, MetricName.DRIFT_CHECK_AGE, merchant)
                    ages[merchant] = max(ages[merchant], age or 0.0)
                time.sleep(0.25)
            ended = time.monotonic()
            deferrals = {
                merchant: _sample(metrics, MetricName.DRIFT_CHECK_DEFERRALS, merchant)
                for merchant in merchants
            }
            still_reading = [_state(warehouse, r) for r in requests]
        finally:
            stopper.stop()
            for merchant in merchants:
                syncs.stop(merchant)
            # The handed-over requests run in threads of their own that ``stop`` does not
            # join: let them end before their database is dropped.
            for thread in threading.enumerate():
                if thread.name.startswith("backfill-") or thread.name == "holder-requests":
                    thread.join(timeout=30)
            session.close()
            host.shutdown()
            warehouse.close()
    stats = sim.stats()
    gaps = {
        (kind, merchant): round(longest_gap(seen[(kind, merchant)], began, ended), 1)
        for kind in ("drift", "catalogue", "cross-check")
        for merchant in merchants
    }
    print(f"longest gaps {gaps}; drift check ages {ages}; deferrals {deferrals}")  # noqa: T201
    # The backfills read throughout: the checks ran beside them, not after them.
    assert still_reading == [RequestState.RUNNING] * MERCHANTS
    assert stats.rate_limit_violations == 0
    late = {
        key: gap
        for key, gap in gaps.items()
        if gap
        > 2 * {"drift": DRIFT, "catalogue": CATALOGUE, "cross-check": CROSS_CHECK}[key[0]] + SLACK
    }
    assert late == {}
    # The metrics tell the same: no drift check older than twice its interval, and each
    # merchant's was deferred behind its backfill's reads (the bound is kept, and seen).
    assert {m: age for m, age in ages.items() if age > 2 * DRIFT + SLACK} == {}
    assert all(count is not None and count > 0 for count in deferrals.values()), deferrals


def _sample(metrics: Metrics, name: MetricName, merchant: str) -> float | None:
    return metrics.registry.get_sample_value(name, {MERCHANT_LABEL: merchant})


def _state(warehouse: Warehouse, request_id: int) -> RequestState | None:
    request = warehouse.requests.get(request_id)
    if request is not None and request.state is RequestState.FAILED:
        pytest.fail(f"the backfill failed at the holder: {request.error}")
    return None if request is None else request.state
