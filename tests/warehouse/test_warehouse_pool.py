"""The warehouse's pool: sized from what the process runs, every checkout timed, a slow one
logged with its waiter."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from recordsync.core.secret import Secret, SecretSource
from recordsync.core.settings import MerchantSettings, Settings
from recordsync.metrics import MetricName, Metrics
from recordsync.service.daemon.run import pool_demand
from recordsync.service.ports.health import PROBE_LIMITS
from recordsync.service.ports.round_events.connections import DEFAULT_LIMITS as EVENTS_LIMITS
from recordsync.sync.jobs import JobHost
from recordsync.warehouse import PoolDemand, Warehouse
from recordsync.warehouse.pool import MOST_CONNECTIONS, SPARE_CONNECTIONS

DEMAND = PoolDemand(
    merchants=10, snapshot_workers=16, periodic_threads=8, event_workers=8, request_threads=4
)


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'pool.db'}"


def test_the_pool_has_a_connection_for_each_thread_that_may_hold_one(url):
    small = PoolDemand(
        merchants=3, snapshot_workers=4, periodic_threads=8, event_workers=0, request_threads=4
    )
    warehouse = Warehouse.connect(url, pool=small)
    try:
        assert warehouse.engine.pool.size() == 3 + 4 + 8 + 0 + 4 + SPARE_CONNECTIONS
    finally:
        warehouse.close()


@pytest.mark.parametrize("ports", [True, False], ids=["both-ports", "no-ports"])
def test_the_daemon_sizes_its_pool_from_its_configuration(url, ports):
    """What ``recordsync run`` asks for: a tail per configured merchant, its snapshot workers
    and periodic threads, and the workers of the ports it opens (none for a port off)."""
    merchants = tuple(
        MerchantSettings(
            f"m-{n}",
            SecretSource.given(Secret("s")),
            "http://127.0.0.1:1",
            datetime(2026, 1, 1, tzinfo=UTC),
        )
        for n in range(3)
    )
    settings = Settings(
        merchants=merchants,
        database_url=url,
        events_port=9109 if ports else 0,
        http_port=9108 if ports else 0,
    )
    host = JobHost(periodic_threads=8, worker_threads=12)
    try:
        demand = pool_demand(settings, host)
        sized = pool_demand(replace(settings, db_pool_size=64), host)
    finally:
        host.shutdown()
    workers = EVENTS_LIMITS.workers + PROBE_LIMITS.workers if ports else 0
    assert demand.size == 3 + 12 + 8 + workers + SPARE_CONNECTIONS
    assert sized.size == 64


def test_the_pool_stays_inside_the_server_s_connections_unless_the_operator_sizes_it(url):
    assert DEMAND.wanted == 10 + 16 + 8 + 8 + 4 + SPARE_CONNECTIONS
    assert DEMAND.size == MOST_CONNECTIONS
    sized = replace(DEMAND, configured=64)
    warehouse = Warehouse.connect(url, pool=sized)
    try:
        assert warehouse.engine.pool.size() == 64
    finally:
        warehouse.close()


def test_a_checkout_that_waits_over_a_second_is_measured_and_names_its_waiter(url):
    metrics = Metrics(CollectorRegistry())
    warehouse = Warehouse.connect(
        url, pool=DEMAND, on_checkout=metrics.pool_checkout, pool_size=1, pool_timeout=10
    )
    held = threading.Event()

    def hold_the_only_connection():
        with warehouse.engine.connect():
            held.set()
            time.sleep(1.3)

    holder = threading.Thread(target=hold_the_only_connection)
    try:
        holder.start()
        held.wait(5)
        with capture_logs() as logs:
            waiters = [
                threading.Thread(target=lambda: warehouse.engine.connect().close(), name=f"w-{n}")
                for n in (1, 2, 3)
            ]
            for waiter in waiters:
                waiter.start()
                time.sleep(0.05)  # in this order in the pool's queue
            for waiter in waiters:
                waiter.join(10)
    finally:
        holder.join(10)
        warehouse.close()
    # Each of the three waited over a second; the log says so once, the metric three times.
    (slow,) = [entry for entry in logs if entry["event"] == "warehouse_pool_checkout_slow"]
    assert slow["waiter"] == "w-1"
    assert slow["seconds"] >= 1.0
    assert slow["pool_size"] == 1
    assert slow["count"] == 1
    registry = metrics.registry
    count = registry.get_sample_value(f"{MetricName.POOL_CHECKOUT}_count")
    assert count is not None
    assert count == 4  # the holder's and the waiters'
    fast = registry.get_sample_value(f"{MetricName.POOL_CHECKOUT}_bucket", {"le": "0.5"})
    slow_or_fast = registry.get_sample_value(f"{MetricName.POOL_CHECKOUT}_bucket", {"le": "+Inf"})
    assert fast is not None
    assert slow_or_fast == count
    assert fast == 1  # every waiter's checkout took over a second
