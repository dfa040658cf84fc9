"""A backfill handed to the merchant's holder gets the budget its own rebuild gets: the
holder's idle tail stretches its polls to the ceiling while the backfill reads, and comes back
to its interval once it ends, because every job that reads windows for a merchant registers with
that merchant's one demand, whichever engine object runs it.

The holder is this process's own daemon assembly (``MerchantSyncs``: the tail, the watcher of
handed-over requests), the backfill a ``sync_requests`` row as ``recordsync backfill`` hands it
over; the simulator counts the requests by endpoint.  The same holds in one process, for a
command's backfill beside a tail of the same merchant.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from recordsync.core.secret import Secret, SecretSource
from recordsync.core.settings import MerchantSettings, Settings
from recordsync.core.state import REBUILD_JOB, backfill_job
from recordsync.core.stopping import Stopper
from recordsync.core.times import floor_ms
from recordsync.metrics import MetricName, Metrics
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.service.daemon.merchant_syncs import MerchantSyncs
from recordsync.service.secrets import SecretKeeper
from recordsync.sim import SimConfig, Simulator
from recordsync.sync.events import SyncObserver
from recordsync.sync.jobs import JobHost
from recordsync.warehouse import RequestKind, RequestState, Warehouse

MERCHANT = "m-demand"
SECRET = "demand-secret-0123456789abcdefghijklmnopqrs"
INTERVAL = 0.1  # the tail's poll interval
CEILING = 1.6  # its ceiling while a job wants the budget: four doublings of the interval
RATE = 25  # record requests a second


class TailWaits(SyncObserver):
    """Every wait the holder's tail decided, in order (what ``recordsync_tail_wait_seconds``
    shows, one value at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waits: list[float] = []

    def tail_interval(self, seconds: float) -> None:
        with self._lock:
            self._waits.append(seconds)

    def since(self, mark: int) -> list[float]:
        with self._lock:
            return self._waits[mark:]

    @property
    def mark(self) -> int:
        with self._lock:
            return len(self._waits)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(
        SimConfig(
            merchant_id=MERCHANT,
            secret=SECRET,
            seed=35,
            history_days=1.0,
            rounds_per_day=4000,
            record_requests=RATE,
            record_seconds=1,
        )
    )
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def demand_settings(sim: Simulator, tmp_path: Path) -> Settings:
    """An idle holder's settings: a short history of its own, a quiet stream, no checks."""
    return Settings(
        merchants=(
            MerchantSettings(
                MERCHANT,
                SecretSource.given(Secret(SECRET)),
                sim.base_url,
                floor_ms(sim.now()) - timedelta(minutes=30),  # the rebuild: a few pages
            ),
        ),
        database_url=f"sqlite:///{tmp_path / 'demand.db'}",
        page_size=25,
        poll_interval=INTERVAL,
        poll_ceiling=CEILING,
        snapshot_concurrency=2,
        drift_check_interval=0,
        catalogue_interval=0,
        http_timeout=5.0,
    )


def wait_until_idle(warehouse: Warehouse, waits: TailWaits) -> None:
    """The rebuild read, and the tail back at its interval over a quiet stream."""
    wait_for(
        lambda: (
            (windows := warehouse.state.load_windows(MERCHANT, REBUILD_JOB)) != []
            and all(window.done for window in windows)
        )
    )
    idle = waits.mark
    wait_for(lambda: waits.since(idle)[-3:] == [INTERVAL] * 3)


def backfill_range(sim: Simulator) -> tuple[datetime, datetime]:
    """A day of history, older than the rebuild's: about 150 pages of 25."""
    now = floor_ms(sim.now())
    return now - timedelta(days=1), now - timedelta(hours=1)


def assert_the_backfill_had_the_budget(
    sim: Simulator, waits: TailWaits, backfill: Callable[[], None]
) -> None:
    """While ``backfill`` runs, the tail's wait stretches to its ceiling and the backfill gets
    at least 0.9 of the record requests; once it ended, the tail reads at its interval."""
    before, during = sim.stats(MERCHANT), waits.mark
    backfill()
    after, ended = sim.stats(MERCHANT), waits.mark
    pages = after.count("records") - before.count("records")
    reads = after.count("record-changes") - before.count("record-changes")
    share = pages / (pages + reads)
    stretched = waits.since(during)[: ended - during]
    print(f"backfill {pages} tail {reads} share {share:.3f} waits {stretched}")  # noqa: T201
    assert max(stretched) == CEILING, stretched
    assert share >= 0.9, (pages, reads)
    assert after.rate_limit_violations == 0
    # The end of the job nudges the tail: it reads at its interval without waiting the ceiling.
    wait_for(lambda: waits.since(ended)[-1:] == [INTERVAL], timeout=CEILING * 3)


def test_a_backfill_handed_to_an_idle_holder_stretches_its_tail_and_gets_the_budget(sim, tmp_path):
    settings = demand_settings(sim, tmp_path)
    warehouse = Warehouse.connect(settings.database_url)
    warehouse.migrate()
    session = warehouse.fleet_session("holder", lease_seconds=10)
    metrics = Metrics()
    stopper = Stopper()
    host = JobHost(worker_threads=8)
    waits = TailWaits()
    syncs = MerchantSyncs(
        settings,
        warehouse=warehouse,
        secrets=SecretKeeper.from_settings(settings),
        metrics=metrics,
        host=host,
        stopper=stopper,
        replica_id="holder",
        extra_observer=lambda _merchant: waits,
        request_poll=0.05,
    )
    start, end = backfill_range(sim)

    def hand_over() -> None:
        request_id = warehouse.requests.ask(
            MERCHANT, RequestKind.BACKFILL, start, end, key=backfill_job(start, end)
        )
        wait_for(lambda: _state(warehouse, request_id) is RequestState.DONE, timeout=60)

    try:
        epoch = session.try_hold(MERCHANT)
        assert epoch is not None
        syncs.start(MERCHANT, epoch)
        wait_until_idle(warehouse, waits)
        assert_the_backfill_had_the_budget(sim, waits, hand_over)
        wait_for(  # what an operator sees
            lambda: (
                metrics.registry.get_sample_value(MetricName.TAIL_WAIT, {"merchant_id": MERCHANT})
                == INTERVAL
            )
        )
    finally:
        stopper.stop()
        syncs.stop(MERCHANT)
        session.close()
        host.shutdown()
        warehouse.close()


def test_a_backfill_beside_a_tail_in_the_same_process_stretches_it(sim, tmp_path):
    """The in-process path: a command's job engine (``MerchantCommand.engine``, as a command
    holding the lease runs its backfill) shares the merchant's demand with the command's
    tail, which runs here."""
    settings = demand_settings(sim, tmp_path)
    waits = TailWaits()
    stopper = Stopper()
    with MerchantCommand(settings, None, stopper, observer=waits) as app:
        tail = threading.Thread(target=app.tail.run, name="tail", daemon=True)
        tail.start()
        try:
            wait_until_idle(app.warehouse, waits)
            start, end = backfill_range(sim)
            job = Stopper(parent=stopper)
            epoch = app.session.try_hold(MERCHANT)
            assert epoch is not None
            assert_the_backfill_had_the_budget(
                sim, waits, lambda: app.engine(epoch, job).backfill(start, end)
            )
        finally:
            stopper.stop()
            tail.join(timeout=30)
        assert not tail.is_alive()


def _state(warehouse: Warehouse, request_id: int) -> RequestState | None:
    request = warehouse.requests.get(request_id)
    if request is not None and request.state is RequestState.FAILED:
        pytest.fail(f"the backfill failed at the holder: {request.error}")
    return None if request is None else request.state
