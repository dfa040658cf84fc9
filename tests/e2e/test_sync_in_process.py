"""The sync engine against the simulator over real loopback HTTP, on all three warehouses.

The engine runs in this process (fast, and its observer hooks let a test act at a precise
moment); the kill -9 and signal tests run it as a real subprocess elsewhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs
from support.fleettiming import QUICK
from support.synccheck import assert_equals_truth, differences, settings_for

from recordsync.core.errors import ClockSkewError
from recordsync.core.state import REBUILD_JOB, Phase
from recordsync.core.stopping import Stopper
from recordsync.core.times import floor_ms
from recordsync.metrics import MetricName
from recordsync.service.commands.backfill import run_backfill
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.service.daemon.run import run_daemon
from recordsync.sim import FaultRates, SimConfig, Simulator
from recordsync.sync.plan import plan_windows
from recordsync.warehouse import HolderRequest, RequestKind, RequestState, Warehouse

pytestmark = pytest.mark.slow

MERCHANT = "m-e2e"
SECRET = "e2e-secret-0123456789abcdefghijklmnopqrstuv"
NOISY = FaultRates(
    projection_lag=0.1,
    rate_limited=0.03,
    server_error=0.08,
    connection_reset=0.05,
    duplicates=0.8,
    extra_fields=0.3,
    malformed=0.06,
)


def config(**overrides: object) -> SimConfig:
    values: dict[str, object] = {
        "merchant_id": MERCHANT,
        "secret": SECRET,
        "seed": 11,
        "history_days": 2.5,
        "rounds_per_day": 600,
        "live_rate": 40.0,
        "record_requests": 20,
        "record_seconds": 1,
    }
    values.update(overrides)
    return SimConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
def sim(request: pytest.FixtureRequest) -> Iterator[Simulator]:
    marker = request.node.get_closest_marker("sim")
    simulator = Simulator(config(**(marker.kwargs if marker else {})))
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()


def sync_until_caught_up(sim: Simulator, url: str) -> bool:
    with MerchantCommand(settings_for(sim, url), None, Stopper(), stop_when_caught_up=True) as app:
        return app.tail.run()


def run_for(
    sim: Simulator,
    url: str,
    seconds: float,
    until: Callable[[], bool] = lambda: True,
    deadline: float = 60.0,
    **overrides: object,
) -> None:
    """The daemon, stopped from outside (as SIGTERM would) once ``seconds`` have passed and
    ``until()`` holds, or at ``deadline``."""
    stopper = Stopper()
    started = time.monotonic()

    def watch() -> None:
        while not stopper.wait(0.2):
            elapsed = time.monotonic() - started
            if (elapsed >= seconds and until()) or elapsed >= deadline:
                stopper.stop()

    with MerchantCommand(settings_for(sim, url, **overrides), None, stopper) as app:
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        assert app.tail.run() is False
        watcher.join()


def settle(sim: Simulator, url: str) -> None:
    """Live traffic and faults off, then one more pass: the warehouse must equal the truth."""
    sim.stop_live()
    sim.set_faults(FaultRates())
    assert sync_until_caught_up(sim, url)


def assert_clean_platform_view(sim: Simulator) -> None:
    stats = sim.stats()
    assert stats.rate_limit_violations == 0
    assert stats.auth_failures == 0


def test_converges_to_the_truth_under_faults_duplicates_and_live_traffic(
    sim: Simulator, warehouse_url: str
) -> None:
    sim.set_faults(NOISY)
    sim.start_live()
    kinds = ("projection_lag", "server_error", "connection_reset", "malformed", "duplicates")
    # At least 6 s of noise, and on until every fault kind has hit the sync at least once.
    run_for(
        sim,
        warehouse_url,
        6.0,
        until=lambda: all(sim.stats().faults(kind) > 0 for kind in kinds),
        page_size=25,
    )
    settle(sim, warehouse_url)
    warehouse = Warehouse.connect(warehouse_url)
    try:
        assert_equals_truth(warehouse, MERCHANT, sim.truth())
        state = warehouse.state.load_state(MERCHANT)
        assert state is not None
        assert state.phase is Phase.TAILING
        assert state.rebuilds == 0
    finally:
        warehouse.close()
    assert_clean_platform_view(sim)
    stats = sim.stats()
    for kind in kinds:
        assert stats.faults(kind) > 0, f"the {kind} fault was never injected"


@pytest.mark.sim(live_rate=0.0)
def test_the_daemons_own_assembly_converges_under_faults_and_a_backfill_handed_to_it(
    sim: Simulator, warehouse_url: str
) -> None:
    """``run_daemon`` itself in this process (the fleet, the merchant's sync as the daemon
    builds it, the holder's requests), not a command's tail: under the same noise, with a
    ``recordsync backfill`` of the first day handed to it meanwhile, it converges and the
    backfill finishes at the holder.  Paused meanwhile, it lets the merchant go
    and exports ``recordsync_merchant_paused`` 1; resumed, it takes it again."""
    sim.set_faults(NOISY)
    sim.start_live()
    stopper = Stopper()
    # The fleet's quick tick and lease (``fleettiming``): a pause and a resume are obeyed at
    # the daemon's next tick, the backfill's command looks for it by its heartbeat.
    settings = settings_for(sim, warehouse_url, page_size=25, **QUICK.settings())
    registry = CollectorRegistry()
    daemon = threading.Thread(
        target=run_daemon,
        args=(settings,),
        kwargs={"registry": registry, "stopper": stopper},
        daemon=True,
    )

    def gauge(name: str) -> float | None:
        return registry.get_sample_value(name, {"merchant_id": MERCHANT})

    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()  # before the daemon: this test's reads never race its first upgrade
    try:
        daemon.start()
        deadline = time.monotonic() + 60
        while warehouse.lease_epoch(MERCHANT) is None:
            assert time.monotonic() < deadline, "the daemon never took the merchant"
            time.sleep(0.1)
        start = floor_ms(sim.now() - timedelta(days=sim.config.history_days))
        with capture_logs() as logs:
            assert run_backfill(settings, start, start + timedelta(hours=6)) == 0
        assert "backfill_handed_over" in [entry["event"] for entry in logs]
        warehouse.controls.pause(MERCHANT, by="a test", reason=None)
        wait_for(lambda: gauge(MetricName.MERCHANT_PAUSED) == 1, 15)
        wait_for(lambda: gauge(MetricName.LEASE_HELD) == 0, 15)
        warehouse.controls.resume(MERCHANT, by="a test")
        wait_for(lambda: gauge(MetricName.MERCHANT_PAUSED) == 0, 15)
        wait_for(lambda: gauge(MetricName.LEASE_HELD) == 1, 15)
        time.sleep(3.0)  # the tail under noise a while longer
        stopper.stop()
        daemon.join(60)
        assert not daemon.is_alive()
        settle(sim, warehouse_url)
        assert_equals_truth(warehouse, MERCHANT, sim.truth())
        [request] = [r for r in _all_requests(warehouse) if r.kind is RequestKind.BACKFILL]
        assert request.state is RequestState.DONE
        assert request.holder is not None  # the daemon's replica ran it
    finally:
        stopper.stop()
        warehouse.close()
    assert_clean_platform_view(sim)


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(0.1)


def _all_requests(warehouse: Warehouse) -> list[HolderRequest]:
    found = []
    request_id = 1
    while (request := warehouse.requests.get(request_id)) is not None:
        found.append(request)
        request_id += 1
    return found


def test_an_expired_records_cursor_restarts_its_window(sim: Simulator, warehouse_url: str) -> None:
    # The first records cursor presented expires, whenever its chain presents it (after a
    # page of its window was committed), and nothing else does.  Not ``sim.expire_cursors()``
    # while the sync runs: that expires the tail's change cursor too, and a tail that
    # presents it first ends the generation for a rebuild before any chain presents its own.
    sim.expire_next_records_cursor()
    with capture_logs() as logs:
        assert sync_until_caught_up(sim, warehouse_url)
    expiries = [entry for entry in logs if entry["event"].endswith("cursor_expired")]
    assert [entry["event"] for entry in expiries] == ["window_cursor_expired"]
    assert not any(entry["event"] == "rebuild_started" for entry in logs)
    warehouse = Warehouse.connect(warehouse_url)
    try:
        assert_equals_truth(warehouse, MERCHANT, sim.truth())
        state = warehouse.state.load_state(MERCHANT)
        assert state is not None
        assert state.rebuilds == 0
    finally:
        warehouse.close()
    assert_clean_platform_view(sim)


@pytest.mark.sim(live_rate=0.0)
def test_an_expired_change_cursor_rebuilds_and_keeps_the_rows(
    sim: Simulator, warehouse_url: str
) -> None:
    assert sync_until_caught_up(sim, warehouse_url)
    # A long stop: the tail's cursor falls out of retention while new changes happen.
    sim.step(300)
    sim.expire_cursors()
    with capture_logs() as logs:
        assert sync_until_caught_up(sim, warehouse_url)
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert [entry["event"] for entry in errors] == ["change_cursor_expired", "rebuild_started"]
    warehouse = Warehouse.connect(warehouse_url)
    try:
        state = warehouse.state.load_state(MERCHANT)
        assert state is not None
        assert state.rebuilds == 1
        assert state.phase is Phase.TAILING
        assert_equals_truth(warehouse, MERCHANT, sim.truth())
    finally:
        warehouse.close()


@pytest.mark.sim(rounds_per_day=0, live_rate=0.0)
def test_a_merchant_that_never_had_a_record(sim: Simulator, warehouse_url: str) -> None:
    assert sim.watermark() == "0"
    assert sync_until_caught_up(sim, warehouse_url)
    warehouse = Warehouse.connect(warehouse_url)
    try:
        assert warehouse.records.fetch_records(MERCHANT) == {}
        state = warehouse.state.load_state(MERCHANT)
        assert state is not None
        assert state.phase is Phase.TAILING
        windows = warehouse.state.load_windows(MERCHANT, REBUILD_JOB)
        assert windows
        assert all(window.done for window in windows)
        # Records created after the anchor arrive through the tail.
        sim.step(50)
        assert sync_until_caught_up(sim, warehouse_url)
        assert_equals_truth(warehouse, MERCHANT, sim.truth())
        assert len(sim.truth()) > 0
    finally:
        warehouse.close()


@pytest.mark.sim(live_rate=0.0)
def test_bad_records_are_quarantined_and_the_rest_syncs(sim: Simulator, warehouse_url: str) -> None:
    sim.set_faults(FaultRates(bad_records=0.5))
    with capture_logs() as logs:
        assert sync_until_caught_up(sim, warehouse_url)
    warehouse = Warehouse.connect(warehouse_url)
    try:
        quarantined = warehouse.records.quarantined(MERCHANT, limit=1000)
        assert quarantined, "no record was quarantined"
        assert all(row.reason and row.raw_json for row in quarantined)
        assert warehouse.records.status(MERCHANT).quarantined == len(quarantined)
        logged = sum(entry["count"] for entry in logs if entry["event"] == "records_quarantined")
        assert logged == len(quarantined)
        # Every difference from the truth is explained by a quarantined item: by its id, or,
        # when the corrupted field was the id itself, one difference per anonymous item.
        quarantined_ids = {row.record_id for row in quarantined if row.record_id}
        anonymous = sum(1 for row in quarantined if not row.record_id)
        differing = {
            problem.removeprefix("missing ").removeprefix("extra ").split(".")[0]
            for problem in differences(warehouse, MERCHANT, sim.truth())
        }
        assert len(differing - quarantined_ids) <= anonymous
    finally:
        warehouse.close()


@pytest.mark.sim(live_rate=0.0, faults=FaultRates(clock_skew_seconds=900))
def test_clock_skew_is_reported_plainly_by_a_backfill(sim: Simulator, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'skew.db'}"
    now = sim.now()
    # The command ends at its first request (capabilities): no other could succeed.
    with (
        capture_logs() as logs,
        pytest.raises(ClockSkewError) as caught,
        MerchantCommand(settings_for(sim, url), None, Stopper()) as app,
    ):
        app.tail.backfill(now - timedelta(hours=2), now)
    assert caught.value.code == "REQUEST_EXPIRED"
    assert "clock" in str(caught.value).lower()
    assert "NTP" in str(caught.value)
    assert SECRET not in repr(logs)


@pytest.mark.sim(live_rate=0.0)
def test_backfill_reads_its_range_without_touching_the_tail(sim: Simulator, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'backfill.db'}"
    # 30 hours across exactly one midnight at any time of day (from "now" back 30 h would
    # cross two between 00:00 and 06:00), inside the 2.5 days of history.
    midnight = sim.now().replace(hour=0, minute=0, second=0, microsecond=0)
    end = midnight - timedelta(hours=6)
    start = end - timedelta(hours=30)
    # Two chains configured: a plan by days (none measured plans for at least the chains).
    with MerchantCommand(settings_for(sim, url, snapshot_concurrency=2), None, Stopper()) as app:
        result = app.tail.backfill(start, end)
        assert app.warehouse.state.load_state(MERCHANT) is None
        rows = app.warehouse.records.fetch_records(MERCHANT)
    expected = {
        record_id
        for record_id, record in sim.truth().items()
        if start.isoformat() <= record["created_at"].replace("Z", "+00:00") < end.isoformat()
    }
    assert result.windows == len(plan_windows(start, end)) == 2  # short ends, one midnight
    assert set(rows) == expected
