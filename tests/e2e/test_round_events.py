"""Round-end notifications end to end: a daemon against the simulator with a 20 s poll
interval makes a round's change visible within a second of its notification, whichever
replica receives it (the holder itself; another one through PostgreSQL's NOTIFY or the
poll of round_events), and the cross-check counts an announced round the records lack until
it arrives."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import httpx
import pytest
from prometheus_client import CollectorRegistry
from service.round_event_requests import event_body, post_event
from sqlalchemy import insert
from synccheck import settings_for

from recordsync.core.stopping import Stopper
from recordsync.metrics import RoundEventMetricName
from recordsync.service.daemon import run_daemon
from recordsync.service.round_events.running import receiving_round_events
from recordsync.service.secrets import SecretKeeper
from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import Warehouse
from recordsync.warehouse.schema import records

pytestmark = pytest.mark.slow

MERCHANT = "m-events"
SECRET = "events-secret-0123456789abcdefghijklmnopqr"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(
        SimConfig(
            merchant_id=MERCHANT,
            secret=SECRET,
            seed=5,
            history_days=0.25,
            rounds_per_day=400,
            live_rate=0.0,  # changes come from step(): the test knows when
            record_requests=20,
        )
    )
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()


def wait_until(condition: Callable[[], bool], timeout: float, step: float = 0.02) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout``."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "timed out"
        time.sleep(step)
    return time.monotonic() - started


@contextmanager
def daemon(sim: Simulator, url: str, **overrides: object) -> Iterator[CollectorRegistry]:
    """``recordsync run`` in a thread, polling every 20 s, caught up when this yields."""
    registry = CollectorRegistry()
    stopper = Stopper()
    settings = settings_for(sim, url, poll_interval=20.0, **overrides)
    thread = threading.Thread(
        target=run_daemon, args=(settings,), kwargs={"registry": registry, "stopper": stopper}
    )
    thread.start()
    try:
        warehouse = Warehouse.connect(url)
        try:
            wait_until(lambda: stored(warehouse) == truth_revisions(sim), 60, step=0.1)
        finally:
            warehouse.close()
        yield registry
    finally:
        stopper.stop()
        thread.join(30)
        assert not thread.is_alive()


def stored(warehouse: Warehouse) -> dict[str, int]:
    try:
        return {key: row["revision"] for key, row in warehouse.fetch_records(MERCHANT).items()}
    except Exception:  # noqa: BLE001 - not migrated yet
        return {}


def truth_revisions(sim: Simulator) -> dict[str, int]:
    return {key: record["revision"] for key, record in sim.truth().items()}


def new_change(sim: Simulator, warehouse: Warehouse) -> tuple[str, int, str]:
    """Step the simulator until a record changes; (record_id, revision, round_id)."""
    before = stored(warehouse)
    for _ in range(50):
        sim.step(1)
        for record_id, record in sim.truth().items():
            if before.get(record_id) != record["revision"]:
                return record_id, record["revision"], record["round_id"]
    raise AssertionError("the simulator made no change")


def announce(port: int, round_id: str, event_id: str) -> httpx.Response:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        return post_event(
            client,
            event_body(event_id, round_id=round_id),
            now=time.time(),
            merchant_id=MERCHANT,
            secret=SECRET,
        )


def free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def visible_within(warehouse: Warehouse, record_id: str, revision: int) -> Callable[[], bool]:
    def check() -> bool:
        row = warehouse.fetch_records(MERCHANT).get(record_id)
        return row is not None and row["revision"] >= revision

    return check


def test_a_notification_to_the_holder_makes_the_change_visible_within_a_second(
    sim: Simulator, tmp_path
) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    port = free_port()
    with daemon(sim, url, events_port=port, events_host="127.0.0.1") as registry:
        warehouse = Warehouse.connect(url)
        try:
            record_id, revision, round_id = new_change(sim, warehouse)
            time.sleep(0.3)
            assert not visible_within(warehouse, record_id, revision)()  # the poll is 20 s off
            response = announce(port, round_id, "ev-holder-1")
            assert response.status_code == 200
            assert wait_until(visible_within(warehouse, record_id, revision), 1.0) < 1.0
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
                unsigned = client.post("/v1/round-events", content=b"{}")
            assert unsigned.json()["error"]["code"] == "AUTHENTICATION_FAILED"
        finally:
            warehouse.close()
        woke = registry.get_sample_value(
            RoundEventMetricName.WAKEUPS, {"merchant_id": MERCHANT, "via": "local"}
        )
        assert woke == 1
    stats = sim.stats()
    assert stats.rate_limit_violations == 0
    assert stats.auth_failures == 0


class NotHere:
    """A replica that holds no merchant: its receiver stores and answers, wakes nothing."""

    def wake(self, merchant_id: str) -> bool:
        return False


# SQLite stands for the poll (MariaDB's is the same code: tests/warehouse covers its query).
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_notification_to_another_replica_wakes_the_holder_through_the_warehouse(
    sim: Simulator, tmp_path, kind: str, request
) -> None:
    from dbfixtures import fresh_database  # noqa: PLC0415

    if kind != "sqlite":
        request.applymarker(getattr(pytest.mark, kind))
    with fresh_database(kind, tmp_path) as url:
        holder_port, other_port = free_port(), free_port()
        with daemon(sim, url, events_port=holder_port, events_host="127.0.0.1") as registry:
            warehouse = Warehouse.connect(url)
            other_settings = replace(
                settings_for(sim, url), events_port=other_port, events_host="127.0.0.1"
            )
            stopper = Stopper()
            try:
                with receiving_round_events(
                    other_settings,
                    warehouse=warehouse,
                    secrets=SecretKeeper.from_settings(other_settings),
                    syncs=NotHere(),
                    metrics=None,
                    replica_id="other-replica",
                    stopper=stopper,
                ):
                    record_id, revision, round_id = new_change(sim, warehouse)
                    response = announce(other_port, round_id, f"ev-other-{kind}")
                    assert response.status_code == 200
                    seconds = wait_until(visible_within(warehouse, record_id, revision), 1.0)
                    assert seconds < 1.0
            finally:
                stopper.stop()
                warehouse.close()
            woke = registry.get_sample_value(
                RoundEventMetricName.WAKEUPS, {"merchant_id": MERCHANT, "via": "warehouse"}
            )
            assert woke == 1


def test_the_cross_check_counts_an_announced_round_the_records_lack_until_it_arrives(
    sim: Simulator, tmp_path
) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    port = free_port()
    missing = {"merchant_id": MERCHANT}
    with daemon(sim, url, events_port=port, events_host="127.0.0.1", event_grace=0.4) as reg:
        assert announce(port, "round-never-synced", "ev-ghost").status_code == 200
        wait_until(
            lambda: (
                reg.get_sample_value(RoundEventMetricName.ROUNDS_ANNOUNCED_MISSING, missing) == 1
            ),
            5,
        )
        warehouse = Warehouse.connect(url)
        try:
            # The round arrives late (written here as a late page would write it).
            [any_row] = list(warehouse.fetch_records(MERCHANT).values())[:1]
            row = {**any_row, "record_id": "late-record", "round_id": "round-never-synced"}
            row["merchant_id"] = MERCHANT
            with warehouse.engine.begin() as conn:
                conn.execute(insert(records).values(**row))
        finally:
            warehouse.close()
        wait_until(
            lambda: (
                reg.get_sample_value(RoundEventMetricName.ROUNDS_ANNOUNCED_MISSING, missing) == 0
            ),
            5,
        )
