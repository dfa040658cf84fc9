"""The daemon receiving the simulator's own round-end notifications (the platform's side:
signed, retried on the spec's schedule, replies read strictly): every announced round reaches
the warehouse though the tail polls every 20 s, a secret rotation mid-run loses nothing, and a
round the simulator announces but hides from record-changes is counted missing until it
appears.  The tests share one daemon and run in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from support.round_event_requests import event_body, post_event
from support.synccheck import settings_for

from recordsync.core.secret import SecretSource
from recordsync.core.stopping import Stopper
from recordsync.metrics import RoundEventMetricName
from recordsync.service.daemon.run import run_daemon
from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import Warehouse

pytestmark = pytest.mark.slow

MERCHANT = "m-sim-events"
OLD_SECRET = "old-secret-0123456789abcdefghijklmnopqrstuv"
NEW_SECRET = "new-secret-0123456789abcdefghijklmnopqrstuv"
OVERLAP = 6.0  # seconds the daemon still accepts the old secret after it changed
KEEPER_INTERVAL = 2.0  # the daemon reads its secret file again this often


def wait_until(condition: Callable[[], bool], timeout: float, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(step)


@dataclass
class Running:
    sim: Simulator
    port: int
    secret_file: Path
    registry: CollectorRegistry
    warehouse: Warehouse

    def round_ids(self) -> set[str]:
        return {row["round_id"] for row in self.warehouse.records.fetch_records(MERCHANT).values()}

    def missing(self) -> float | None:
        return self.registry.get_sample_value(
            RoundEventMetricName.ROUNDS_ANNOUNCED_MISSING, {"merchant_id": MERCHANT}
        )


@pytest.fixture(scope="module")
def running(tmp_path_factory) -> Iterator[Running]:
    import socket  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sim = Simulator(
        SimConfig(
            merchant_id=MERCHANT,
            secret=OLD_SECRET,
            seed=8,
            history_days=0.25,
            rounds_per_day=400,
            record_requests=20,
            events_url=f"http://127.0.0.1:{port}",
            events_time_scale=0.2,  # retries after 0.2 s, 1 s, 6 s, ...
        )
    )
    sim.start()
    directory = tmp_path_factory.mktemp("sim-events")
    secret_file = directory / "secret"
    secret_file.write_text(OLD_SECRET)
    secret_file.chmod(0o600)
    url = f"sqlite:///{directory / 'w.db'}"
    base = settings_for(sim, url)
    settings = replace(
        base,
        merchants=(replace(base.merchants[0], secret=SecretSource.file(secret_file)),),
        poll_interval=20.0,
        events_port=port,
        events_host="127.0.0.1",
        event_grace=0.5,
        secret_overlap=OVERLAP,
    )
    registry, stopper = CollectorRegistry(), Stopper()
    thread = threading.Thread(
        target=run_daemon, args=(settings,), kwargs={"registry": registry, "stopper": stopper}
    )
    thread.start()
    warehouse = Warehouse.connect(url)
    try:
        truth = {key: record["revision"] for key, record in sim.truth().items()}

        def caught_up() -> bool:
            try:
                rows = warehouse.records.fetch_records(MERCHANT)
            except Exception:  # noqa: BLE001 - not migrated yet
                return False
            return {key: row["revision"] for key, row in rows.items()} == truth

        wait_until(caught_up, 60)
        yield Running(sim, port, secret_file, registry, warehouse)
        stats = sim.stats()
        assert stats.rate_limit_violations == 0
        assert stats.auth_failures == 0
    finally:
        stopper.stop()
        thread.join(30)
        warehouse.close()
        sim.stop()


def rounds_end(sim: Simulator, count: int = 3) -> None:
    """Live traffic until at least ``count`` more rounds ended (and were announced)."""
    target = sim.stats().events.announced + count
    for _ in range(200):
        sim.step(5)
        if sim.stats().events.announced >= target:
            return
    raise AssertionError("no round ended")


def announced_rounds(sim: Simulator) -> set[str]:
    return {announcement.round_id for announcement in sim.announced()}


def assert_delivered_cleanly(sim: Simulator) -> None:
    assert sim.wait_events(15)
    events = sim.stats().events
    assert events.delivered == events.announced
    assert events.given_up == events.dropped == 0
    assert dict(events.deviations) == {}


def test_every_round_the_simulator_announces_reaches_the_warehouse_between_polls(running):
    sim = running.sim
    for _ in range(3):  # live traffic, a burst at a time
        rounds_end(sim)
        time.sleep(0.2)
    wait_until(lambda: announced_rounds(sim) <= running.round_ids(), 2.0)
    assert_delivered_cleanly(sim)
    assert set(sim.stats().events.replies) == {200}


def test_a_secret_rotation_mid_run_loses_no_notification(running):
    sim = running.sim
    rounds_end(sim)  # signed with the old secret
    sim.rotate_secret(MERCHANT, NEW_SECRET)  # the platform accepts both, signs with the new
    running.secret_file.write_text(NEW_SECRET)  # the operator installs the new one
    written = time.monotonic()
    rounds_end(sim)  # signed with the new secret: refused until the daemon reads its file again
    time.sleep(max(0.0, written + KEEPER_INTERVAL + 0.5 - time.monotonic()))
    with httpx.Client(base_url=f"http://127.0.0.1:{running.port}", timeout=5) as client:
        # The daemon has read the new secret (within KEEPER_INTERVAL of the write) and still
        # accepts the old one: the overlap runs for OVERLAP from that read.
        old = post_event(
            client,
            event_body("ev-old-secret", round_id=min(announced_rounds(sim))),
            now=time.time(),
            merchant_id=MERCHANT,
            secret=OLD_SECRET,
        )
        assert old.status_code == 200
        rounds_end(sim)
        sim.retire_secret(MERCHANT)
        rounds_end(sim)
        assert_delivered_cleanly(sim)
        wait_until(lambda: announced_rounds(sim) <= running.round_ids(), 3.0)
        # And refuses the old one once the overlap has passed, however long the above took.
        time.sleep(max(0.0, written + KEEPER_INTERVAL + OVERLAP + 0.5 - time.monotonic()))
        late = post_event(
            client,
            event_body("ev-old-late"),
            now=time.time(),
            merchant_id=MERCHANT,
            secret=OLD_SECRET,
        )
        assert late.status_code == 401


def test_a_round_announced_but_hidden_is_counted_missing_until_it_appears(running):
    sim = running.sim
    round_id = sim.announce_hidden_round()
    wait_until(lambda: running.missing() == 1, 5)
    assert round_id not in running.round_ids()
    sim.reveal_round(round_id)
    rounds_end(sim, 1)  # a round end wakes the tail, which reads the revealed round with it
    wait_until(lambda: round_id in running.round_ids(), 3)
    wait_until(lambda: running.missing() == 0, 3)
