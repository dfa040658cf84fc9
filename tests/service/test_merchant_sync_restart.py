"""A merchant's sync that dies of an unexpected error (a bug) restarts by itself: after an
exponential backoff with jitter, under the lease it holds, logged by class and counted per
merchant, while the other merchants sync on; a stop ends the wait at once.

The bug is scripted in the sync's store (the ``SyncStore`` the service gets from
``Warehouse.fenced``): a real simulator, a real SQLite warehouse, a real fleet session.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
import structlog.testing
from sqlalchemy import Engine

from recordsync.core.secret import Secret, SecretSource
from recordsync.core.settings import MerchantSettings, Settings
from recordsync.core.state import SyncState
from recordsync.core.stopping import Stopper
from recordsync.metrics import MetricName, Metrics
from recordsync.service.daemon.merchant_syncs import MerchantSyncs, RestartPolicy, failure_site
from recordsync.service.secrets import SecretKeeper
from recordsync.sim import SimConfig, Simulator
from recordsync.sim.config import derived_secret
from recordsync.sync.jobs import JobHost
from recordsync.warehouse import HolderRequest, Warehouse
from recordsync.warehouse.merchant_store import MerchantStore
from recordsync.warehouse.requests.store import RequestStore

GOOD, BUGGY = "brand-1", "brand-2"
# A message a careless bug could build: it must never reach a log line.
LEAKY_MESSAGE = "token=" + "s3cr3t-" * 6


class ScriptedBugError(RuntimeError):
    pass


class BuggyStore(MerchantStore):
    """The real fenced store whose first ``fail`` state reads raise, like a bug would."""

    def __init__(self, warehouse: Warehouse, merchant_id: str, epoch: int, script: Script) -> None:
        super().__init__(merchant_id, epoch, warehouse.store_parts())
        self._script = script

    def load_state(self) -> SyncState | None:
        self._script.attempt()
        return super().load_state()


class Script:
    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.attempts: list[float] = []
        self._lock = threading.Lock()

    def attempt(self) -> None:
        with self._lock:
            self.attempts.append(time.monotonic())
            if len(self.attempts) <= self.fail:
                raise ScriptedBugError(LEAKY_MESSAGE)


class ScriptedWarehouse(Warehouse):
    """The warehouse, with BUGGY's store and GOOD's look for requests scripted to fail."""

    script: Script
    watch_script: Script

    def fenced(self, merchant_id: str, epoch: int) -> MerchantStore:
        if merchant_id == BUGGY:
            return BuggyStore(self, merchant_id, epoch, self.script)
        return super().fenced(merchant_id, epoch)

    @property
    def requests(self) -> RequestStore:
        return ScriptedRequests(self.engine, self.watch_script)


class ScriptedRequests(RequestStore):
    """The request book, its look for GOOD's requests scripted to fail."""

    def __init__(self, engine: Engine, script: Script) -> None:
        super().__init__(engine)
        self._script = script

    def unfinished(self, merchant_ids: tuple[str, ...]) -> list[HolderRequest]:
        if GOOD in merchant_ids:
            self._script.attempt()
        return super().unfinished(merchant_ids)


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    config = SimConfig(
        merchant_id="brand", seed=3, history_days=0.1, rounds_per_day=200, record_requests=50
    ).with_merchants(2)
    simulator = Simulator(config)
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()


class Fixture:
    def __init__(
        self, sim: Simulator, tmp_path, fail: int, policy: RestartPolicy, watch_fail: int = 0
    ) -> None:
        history_from = sim.now() - timedelta(hours=1)
        self.settings = Settings(
            merchants=tuple(
                MerchantSettings(
                    merchant_id,
                    SecretSource.given(Secret(derived_secret(3, merchant_id))),
                    sim.base_url,
                    history_from,
                )
                for merchant_id in (GOOD, BUGGY)
            ),
            database_url=f"sqlite:///{tmp_path / 'wh.db'}",
            poll_interval=0.2,
            drift_check_interval=0,
        )
        self.warehouse = ScriptedWarehouse.connect(self.settings.database_url)
        self.warehouse.script = Script(fail)
        self.warehouse.watch_script = Script(watch_fail)
        self.warehouse.migrate()
        self.session = self.warehouse.fleet_session("r1", lease_seconds=10)
        self.metrics = Metrics()
        self.stopper = Stopper()
        self.host = JobHost(worker_threads=8)
        self.syncs = MerchantSyncs(
            self.settings,
            warehouse=self.warehouse,
            secrets=SecretKeeper.from_settings(self.settings),
            metrics=self.metrics,
            host=self.host,
            stopper=self.stopper,
            replica_id="r1",
            restart=policy,
            rng=random.Random(7),
            request_poll=0.05,
        )

    def start(self) -> None:
        for merchant_id in (GOOD, BUGGY):
            epoch = self.session.try_hold(merchant_id)
            assert epoch is not None
            self.syncs.start(merchant_id, epoch)

    def failures(self) -> float:
        value = self.metrics.registry.get_sample_value(
            MetricName.SYNC_FAILURES, {"merchant_id": BUGGY, "kind": "ScriptedBugError"}
        )
        return value or 0.0

    def close(self) -> None:
        self.stopper.stop()
        for merchant_id in (GOOD, BUGGY):
            self.syncs.stop(merchant_id)
        self.session.close()
        self.host.shutdown()
        self.warehouse.close()


@pytest.fixture
def make(sim, tmp_path) -> Iterator[type[Fixture] | object]:
    made: list[Fixture] = []

    def build(fail: int, policy: RestartPolicy, watch_fail: int = 0) -> Fixture:
        fixture = Fixture(sim, tmp_path, fail, policy, watch_fail)
        made.append(fixture)
        return fixture

    yield build
    for fixture in made:
        fixture.close()


def wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_restart_delays_double_with_jitter_up_to_the_cap_and_never_near_zero():
    policy = RestartPolicy(base=5.0, cap=300.0)
    rng = random.Random(1)
    for failures, ceiling in [(1, 5), (2, 10), (3, 20), (7, 300), (8, 300), (500, 300)]:
        delays = [policy.delay(failures, rng) for _ in range(200)]
        assert ceiling / 2 <= min(delays) <= max(delays) <= ceiling
        assert max(delays) - min(delays) > ceiling / 4  # jittered: replicas spread out
    with pytest.raises(ValueError, match="base"):
        RestartPolicy(base=0, cap=1)


def test_failure_site_names_frames_never_the_message():
    try:
        Script(fail=1).attempt()
    except ScriptedBugError as exc:
        site = failure_site(exc)
    assert "test_merchant_sync_restart.py" in site
    assert "attempt" in site
    assert "s3cr3t" not in site


def test_a_buggy_merchant_restarts_with_backoff_while_the_other_syncs(make):
    fixture = make(fail=3, policy=RestartPolicy(base=0.2, cap=0.4))
    with structlog.testing.capture_logs() as logs:
        fixture.start()
        wait_for(lambda: fixture.metrics.last_commit_at(GOOD) is not None)
        wait_for(lambda: fixture.metrics.last_commit_at(BUGGY) is not None)
        # Never released: the fleet would otherwise hand it round at every tick.
        assert fixture.syncs.running() == {GOOD, BUGGY}
        assert fixture.session.still_held() == {GOOD, BUGGY}
    attempts = fixture.warehouse.script.attempts
    waits = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    # Failure n waits between half and all of min(0.4, 0.2 * 2 ** (n - 1)).
    assert len(waits) >= 3
    for wait, ceiling in zip(waits, (0.2, 0.4, 0.4), strict=False):
        assert wait >= ceiling / 2 - 0.01
    assert fixture.failures() == 3
    failed = [line for line in logs if line["event"] == "merchant_sync_failed"]
    assert [line["failures"] for line in failed] == [1, 2, 3]
    assert {line["merchant_id"] for line in failed} == {BUGGY}
    assert {line["kind"] for line in failed} == {"ScriptedBugError"}
    assert all("load_state" in line["where"] for line in failed)
    assert "s3cr3t" not in repr(logs)
    assert not any(
        line.get("merchant_id") == GOOD and line["log_level"] == "error" for line in logs
    )


def test_a_merchant_that_keeps_failing_waits_longer_each_time_never_a_hot_loop(make):
    fixture = make(fail=10**6, policy=RestartPolicy(base=0.1, cap=0.4))
    fixture.start()
    wait_for(lambda: fixture.failures() >= 3)  # past 0.05-0.1 and 0.1-0.2 s: now 0.2-0.4 s
    before = len(fixture.warehouse.script.attempts)
    time.sleep(1.2)
    attempts = len(fixture.warehouse.script.attempts) - before
    assert 2 <= attempts <= 7  # 1.2 s / 0.2-0.4 s, plus the one in flight
    assert fixture.syncs.running() == {GOOD, BUGGY}
    pages_before = fixture.metrics.last_commit_at(GOOD)
    wait_for(lambda: fixture.metrics.last_commit_at(GOOD) != pages_before)  # GOOD goes on


def test_a_stop_ends_the_backoff_at_once(make):
    fixture = make(fail=1, policy=RestartPolicy(base=300.0, cap=300.0))
    fixture.start()
    wait_for(lambda: fixture.failures() == 1)
    started = time.monotonic()
    fixture.syncs.stop(BUGGY)
    assert time.monotonic() - started < 5.0  # not the 300 s backoff
    assert fixture.syncs.running() == {GOOD}


def test_a_bug_while_looking_for_requests_is_retried_and_the_sync_goes_on(make):
    fixture = make(fail=0, policy=RestartPolicy(base=0.05, cap=0.1), watch_fail=2)
    with structlog.testing.capture_logs() as logs:
        fixture.start()
        wait_for(lambda: len(fixture.warehouse.watch_script.attempts) >= 4)  # polling again
        wait_for(lambda: fixture.metrics.last_commit_at(GOOD) is not None)
    failed = [line for line in logs if line["event"] == "requests_watch_failed"]
    assert [line["failures"] for line in failed] == [1, 2]  # one watcher for every merchant
    assert {line["kind"] for line in failed} == {"ScriptedBugError"}
    assert "s3cr3t" not in repr(logs)
    assert fixture.syncs.running() == {GOOD, BUGGY}
