"""A first load the writer would bound leaves the BI indexes out and ends with them, against
the simulator over loopback HTTP on all three warehouses: a backfill killed half-way, then
resumed; a daemon taking up a merchant whose rebuild is done but whose indexes are missing (a
kill between the last window and the build); and a first load the rate limit bounds, which
keeps them all along."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from support.synccheck import assert_equals_truth, running, settings_for

from recordsync.core.state import Window
from recordsync.core.stopping import Stopper
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.sim import SimConfig, Simulator
from recordsync.sync.events import SyncObserver
from recordsync.warehouse import Warehouse
from recordsync.warehouse.bi.indexes import BI_INDEX_NAMES, drop_statements

pytestmark = pytest.mark.slow

MERCHANT = "m-bi"
SECRET = "bi-secret-0123456789abcdefghijklmnopqrstuvwx"
ALL = sorted(BI_INDEX_NAMES)


class KillAfter(SyncObserver):
    """Raises out of a page's commit hook after ``pages`` pages: nothing after it runs, as
    after a kill -9."""

    def __init__(self, pages: int) -> None:
        self.pages = 0
        self.kill_at = pages

    def window_page(self, job: str, window: Window, records: int, *, done: bool) -> None:
        self.pages += 1
        if self.pages >= self.kill_at:
            raise RuntimeError("kill -9")


@pytest.fixture
def sim() -> Iterator[Simulator]:
    config = SimConfig(
        merchant_id=MERCHANT,
        secret=SECRET,
        seed=5,
        history_days=1.5,
        rounds_per_day=400,
        live_rate=0.0,
        # 200 pages of 50 records a second: 10 000 records/s, a limit the writer would bound
        # (sync.indexes.WRITE_BOUND_RECORDS_PER_S).
        record_requests=200,
        record_seconds=1,
    )
    with running(config) as simulator:
        yield simulator


def missing(url: str) -> list[str]:
    store = Warehouse.connect(url)
    try:
        return store.bi.missing_bi_indexes()
    finally:
        store.close()


def test_a_backfill_killed_half_way_then_resumed_ends_with_its_indexes(
    sim: Simulator, warehouse_url: str
) -> None:
    end = sim.now()
    start = end - timedelta(days=1)
    settings = settings_for(sim, warehouse_url, page_size=50, snapshot_concurrency=2)
    with (
        pytest.raises(RuntimeError, match="kill -9"),
        MerchantCommand(settings, None, Stopper(), observer=KillAfter(pages=3)) as app,
    ):
        app.tail.backfill(start, end)
    assert missing(warehouse_url) == ALL

    with MerchantCommand(settings, None, Stopper()) as app:
        app.tail.backfill(start, end)
    assert missing(warehouse_url) == []


def test_a_daemon_builds_them_for_a_merchant_whose_rebuild_is_done(
    sim: Simulator, warehouse_url: str
) -> None:
    settings = settings_for(sim, warehouse_url, page_size=100)
    with MerchantCommand(settings, None, Stopper(), stop_when_caught_up=True) as app:
        assert app.tail.run() is True  # the first rebuild: left out, then built
        assert app.warehouse.bi.missing_bi_indexes() == []
        # A kill between the last window and the build leaves them out.
        with app.warehouse.engine.begin() as conn:
            for statement in drop_statements(conn.dialect.name, str, ALL):
                conn.exec_driver_sql(statement)
    assert missing(warehouse_url) == ALL

    with MerchantCommand(settings, None, Stopper(), stop_when_caught_up=True) as app:
        assert app.tail.run() is True
        assert app.warehouse.bi.missing_bi_indexes() == []
        assert_equals_truth(app.warehouse, MERCHANT, sim.truth())


def test_a_first_load_the_rate_limit_bounds_keeps_them_all_along(
    sim: Simulator, warehouse_url: str
) -> None:
    """Pages of 20 at 200 a second: 4 000 records/s, which an indexed writer keeps up with, so
    leaving the indexes out would only add their build to the job's end."""

    class Watch(SyncObserver):
        def __init__(self) -> None:
            self.missing: list[list[str]] = []

        def window_page(self, job: str, window: Window, records: int, *, done: bool) -> None:
            self.missing.append(missing(warehouse_url))

    end = sim.now()
    watch = Watch()
    settings = settings_for(sim, warehouse_url, page_size=20, snapshot_concurrency=2)
    with MerchantCommand(settings, None, Stopper(), observer=watch) as app:
        app.tail.backfill(end - timedelta(days=1), end)
    assert watch.missing
    assert all(names == [] for names in watch.missing)
