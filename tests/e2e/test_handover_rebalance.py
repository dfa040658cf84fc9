"""Work handed to a daemon across a rebalance between two replicas, in place of a restart:
daemons and commands in processes of their own, on PostgreSQL.

The lock of a merchant is free for a moment when its holder hands it to a replica that joined;
a command following a job must not take it then.  So: two merchants held by D1, a resync of
each handed to D1, then D2 joins and the fleet moves one merchant to it; D2 holds it within
two ticks, runs the rest of that merchant's job beside its tail, and both jobs finish.
"""

from __future__ import annotations

import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from support.dbfixtures import SERVER_PARAMS
from support.fleetcheck import (
    Replica,
    assert_truth,
    events,
    holders,
    wait_until_all_held,
    wait_until_balanced,
    write_config,
)
from support.fleettiming import QUICK
from support.synccheck import start_daemon, stop_gracefully

from recordsync.sim import SimConfig, Simulator
from recordsync.sim.config import FaultRates
from recordsync.warehouse import Warehouse

pytestmark = pytest.mark.slow

TIMING = QUICK  # the daemons' and the commands' tick and lease (``fleettiming``)
# A daemon joining holds the merchant moved to it within its announce wait and two ticks,
# after the page in hand its giver commits first.
HELD_WITHIN = TIMING.announce_wait + 2 * TIMING.tick
SLOW_PAGE = 3.0  # seconds: each page while D2 starts and the fleet moves a merchant


def command(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``recordsync --config CONFIG ARGS`` in a process of its own, its output in ``log``."""
    return start_daemon({}, log, "--config", str(config), *args)


def found(log: Path, name: str, merchant_id: str) -> list[dict[str, object]]:
    return [
        e for e in events(log) if e.get("event") == name and e.get("merchant_id") == merchant_id
    ]


def wait_for_event(log: Path, name: str, merchant_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found(log, name, merchant_id):
            return
        time.sleep(0.1)
    raise AssertionError(f"no {name} of {merchant_id} in {log} within {timeout} s")


def slow_pages(sim: Simulator, merchants: list[str], *, latency_ms: float) -> None:
    """Every ``records`` request of ``merchants`` answered ``latency_ms`` late."""
    for merchant in merchants:
        sim.set_faults(FaultRates(records_latency_ms=latency_ms), merchant_id=merchant)


def at(event: dict[str, object]) -> float:
    return datetime.fromisoformat(str(event["timestamp"])).timestamp()


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS[:1], indirect=True)
def test_jobs_handed_to_a_daemon_survive_a_rebalance_to_a_replica_that_joins(
    warehouse_url: str, tmp_path: Path
):
    sim = Simulator(
        SimConfig(
            merchant_id="moved",
            secret="rebalance-secret-0123456789abcdefghijklmnopq",
            seed=91,
            history_days=1.0,
            rounds_per_day=3000,
            live_rate=3.0,
            record_requests=10,
        ).with_merchants(2)
    )
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml", *TIMING.toml_lines())
    merchants = list(sim.merchant_ids)
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    d1 = Replica(config, tmp_path / "d1.log")
    d2: Replica | None = None
    jobs: dict[str, subprocess.Popen[bytes]] = {}
    logs = {merchant: tmp_path / f"resync-{merchant}.log" for merchant in merchants}
    try:
        assert_truth(warehouse, sim, merchants)
        wait_until_all_held(warehouse, merchants, timeout=30)
        assert set(holders(warehouse).values()) == {
            str(e["replica_id"]) for e in events(d1.log) if e.get("event") == "replica_joined"
        }
        slow_pages(sim, merchants, latency_ms=500.0)  # a job takes seconds
        sim.start_live()
        end = sim.now().replace(microsecond=0)
        window = ("--from", (end - timedelta(days=1, hours=1)).isoformat(), "--to", end.isoformat())
        for merchant in merchants:
            resync = ("merchant", "resync", merchant, *window)
            jobs[merchant] = command(config, logs[merchant], *resync)
        for merchant in merchants:
            wait_for_event(d1.log, "requested_resync_started", merchant, timeout=30)
        # While D2 starts and the fleet moves a merchant, a page takes 3 s (below the 5 s
        # timeout): each job's 16 pages a chain outlast the move however slowly D2 starts,
        # so the move always meets both jobs in flight.
        slow_pages(sim, merchants, latency_ms=SLOW_PAGE * 1000)
        d2 = Replica(config, tmp_path / "d2.log")
        _took, counts = wait_until_balanced(warehouse, merchants, live=2, timeout=30)
        assert counts == [1, 1]
        assert all(job.poll() is None for job in jobs.values())  # still following
        slow_pages(sim, merchants, latency_ms=500.0)
        for merchant, job in jobs.items():
            assert job.wait(timeout=120) == 0, logs[merchant].read_text()[-2000:]
        assert_the_moved_job_ended_at_d2(d1.log, d2.log, logs, ended=time.time())
        sim.stop_live()
        for merchant in merchants:
            sim.set_faults(FaultRates(), merchant_id=merchant)
        assert_truth(warehouse, sim, merchants)
    finally:
        for process in (*jobs.values(), d1.process, None if d2 is None else d2.process):
            if process is not None and process.poll() is None:
                stop_gracefully(process)
        sim.stop()
        warehouse.close()
    assert [sim.stats(merchant).rate_limit_violations for merchant in merchants] == [0, 0]


def assert_the_moved_job_ended_at_d2(
    d1: Path, d2: Path, logs: dict[str, Path], *, ended: float
) -> None:
    """D2 held the merchant moved to it within two ticks of joining and ran the rest of its
    job; D1 finished the other's; neither command took a lease at the free moment."""
    (moved,) = [m for m in logs if found(d2, "merchant_sync_started", m)]
    joined = at(next(e for e in events(d2) if e.get("event") == "replica_joined"))
    synced = at(found(d2, "merchant_sync_started", moved)[0])
    held_after = synced - joined
    print(f"D2 held {moved} {held_after:.2f} s after joining")  # noqa: T201 - a figure
    assert held_after <= HELD_WITHIN + SLOW_PAGE
    assert synced < ended  # its tail ran while the job went on
    assert found(d2, "requested_resync_finished", moved)  # the rest ran at D2
    (stayed,) = set(logs) - {moved}
    assert found(d1, "requested_resync_finished", stayed)
    for log in logs.values():
        names = {str(e.get("event")) for e in events(log)}
        assert "resync_taken_back" not in names  # not at the free moment of the move
        assert "resync_finished" in names
    # D2 may stand by at its first tick while D1 finishes the page in hand (3 s pages here,
    # so on a loaded machine it does): what the hand-over must prevent is standing by for the
    # job's length (the bound above) or after holding it.
    waits = [at(e) for e in events(d2) if e.get("event") == "lease_waiting"]
    assert all(waited <= synced for waited in waits), (waits, synced)
