"""A backfill whose windows are cut for more chains as it goes (``sync.windows``), killed in
the middle and resumed, against the simulator over loopback HTTP into SQLite: the warehouse
ends equal to the simulator's truth for the range."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta

import pytest
from support.synccheck import KillAfterSplit, running, settings_for

from recordsync.core.state import backfill_job
from recordsync.core.stopping import Stopper
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.sim import FaultRates, SimConfig, Simulator
from recordsync.warehouse import Warehouse

pytestmark = pytest.mark.slow

MERCHANT = "m-split"
SECRET = "split-secret-0123456789abcdefghijklmnopqrstuv"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    # A fast budget with a slow answer: many chains wanted, a short test.
    config = SimConfig(
        merchant_id=MERCHANT,
        secret=SECRET,
        seed=7,
        history_days=1.0,
        rounds_per_day=800,
        live_rate=0.0,
        record_requests=40,
        record_seconds=1,
    )
    with running(config) as simulator:
        # The platform slow on its pages, not the network: the capabilities call is quick, so
        # the job starts narrow and must cut its windows as the answers come.
        simulator.set_faults(FaultRates(records_latency_ms=150))
        yield simulator


def test_a_split_backfill_killed_mid_way_resumes_to_the_truth(sim: Simulator, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'split.db'}"
    end = sim.now()
    start = end - timedelta(days=1, hours=1)
    job = backfill_job(start, end)
    settings = settings_for(sim, url, page_size=25, snapshot_concurrency=2)
    with (
        pytest.raises(RuntimeError, match="kill -9"),
        MerchantCommand(settings, None, Stopper(), observer=KillAfterSplit(pages=8)) as app,
    ):
        app.tail.backfill(start, end)
    warehouse = Warehouse.connect(url)
    try:
        cut = warehouse.state.load_windows(MERCHANT, job)
    finally:
        warehouse.close()
    assert len(cut) > 2, "windows were cut for more chains"
    assert not all(item.done for item in cut)

    with MerchantCommand(settings, None, Stopper()) as app:
        app.tail.backfill(start, end)
        windows = app.warehouse.state.load_windows(MERCHANT, job)
        rows = app.warehouse.records.fetch_records(MERCHANT)
    assert all(item.done for item in windows)
    for left, right in itertools.pairwise(windows):
        assert left.window.end == right.window.start
    expected = {
        record_id: record
        for record_id, record in sim.truth().items()
        if start.isoformat() <= record["created_at"].replace("Z", "+00:00") < end.isoformat()
    }
    assert set(rows) == set(expected)
    assert all(rows[key]["revision"] == expected[key]["revision"] for key in expected)
    assert sim.stats().rate_limit_violations == 0
