"""The warehouse server goes away mid-sync and comes back: the daemon waits, reconnects and
carries on, losing nothing and never exiting on its own.

Each test stops and starts a server of its own (tests/support/private_servers.py), never the shared
ones, so it runs beside the rest of the suite.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support.fleetchaos import Chaos
from support.fleettiming import QUICK
from support.private_servers import PrivateServer
from support.synccheck import environment_for, start_daemon, stop_gracefully, wait_for_truth

from recordsync.fleet.member import BACKOFF_TICKS
from recordsync.sim import SimConfig, Simulator, running_simulator

pytestmark = pytest.mark.slow

# The daemons' tick and lease (``fleettiming``): a replica tries the warehouse again after a
# backoff of ticks, so how soon it holds its merchants again is written in ticks.
TIMING = QUICK


def test_the_daemon_rides_out_a_warehouse_restart(
    private_server: PrivateServer, tmp_path: Path
) -> None:
    warehouse_url, stop, start = private_server.url, private_server.stop, private_server.start
    sim = Simulator(
        SimConfig(
            merchant_id="m-restart",
            secret="restart-secret-0123456789abcdefghijklmnopq",
            seed=5,
            history_days=2.0,
            rounds_per_day=800,
            live_rate=30.0,
            record_requests=10,
        )
    )
    sim.start()
    log = tmp_path / "daemon.log"
    try:
        env = environment_for(sim, warehouse_url, RECORDSYNC_PAGE_SIZE="50", **TIMING.env())
        sim.start_live()
        daemon = start_daemon(env, log)
        try:
            time.sleep(3.0)  # mid-snapshot
            stop()
            try:
                time.sleep(4.0)
                assert daemon.poll() is None, "the daemon exited while the warehouse was down"
            finally:
                start()
            sim.stop_live()
            problems = wait_for_truth(sim, warehouse_url, timeout=120)
            assert daemon.poll() is None
        finally:
            code, _seconds = stop_gracefully(daemon)
        output = log.read_text()
        assert problems == [], f"{len(problems)} differences, first {problems[:5]}"
        assert code == 0
        assert '"kind": "WarehouseUnavailableError"' in output
        assert sim.stats().rate_limit_violations == 0
    finally:
        sim.stop()


def _events(log: Path) -> list[dict[str, object]]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line) for line in lines if line.startswith("{")]


def _wait_for_event(log: Path, event: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(entry.get("event") == event for entry in _events(log)):
            return
        time.sleep(0.2)
    raise AssertionError(f"no {event} in the daemon's log within {timeout} s")


def _drift_outages(events: list[dict[str, object]]) -> list[int]:
    """Where an outage met the running drift check: the check's step failed, or the lease
    could not be confirmed and the merchant's sync, the check with it, stopped."""
    return [
        number
        for number, entry in enumerate(events)
        if (entry.get("step") == "drift check" and entry.get("kind") == "WarehouseUnavailableError")
        or entry.get("event") == "lease_unconfirmed"
    ]


def _wait_for_check_after_last_outage(log: Path, timeout: float) -> None:
    """A drift check that ends after the last outage: the job outlived every restart."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = _events(log)
        outages = _drift_outages(events)
        if outages and any(
            entry.get("event") in {"drift_checked", "drift_found"}
            for entry in events[outages[-1] + 1 :]
        ):
            return
        time.sleep(0.5)


def test_the_daemon_rides_out_warehouse_restarts_during_its_periodic_jobs(
    private_server: PrivateServer, tmp_path: Path
) -> None:
    """Issue 16, point 1: with the drift check running back to back (an interval of 1 s; a
    check reads a whole day, so it is nearly always busy), every restart of the database
    server meets a running check.  The daemon never exits and ends equal to the truth."""
    warehouse_url, stop, start = private_server.url, private_server.stop, private_server.start
    sim = Simulator(
        SimConfig(
            merchant_id="m-periodic",
            secret="periodic-secret-0123456789abcdefghijklmn",
            seed=9,
            history_days=2.0,
            rounds_per_day=800,
            live_rate=20.0,
            record_requests=10,
        )
    )
    sim.start()
    log = tmp_path / "daemon.log"
    try:
        env = environment_for(
            sim,
            warehouse_url,
            RECORDSYNC_PAGE_SIZE="50",
            RECORDSYNC_DRIFT_CHECK_INTERVAL="1",
            **TIMING.env(),
        )
        sim.start_live()
        daemon = start_daemon(env, log)
        try:
            _wait_for_event(log, "drift_checked", timeout=90)  # snapshot done, checks running
            for _restart in range(3):
                stop()
                try:
                    time.sleep(3.0)
                    assert daemon.poll() is None, "the daemon exited while the warehouse was down"
                finally:
                    start()
                time.sleep(4.0)
                assert daemon.poll() is None, "the daemon exited after the warehouse came back"
            sim.stop_live()
            problems = wait_for_truth(sim, warehouse_url, timeout=120)
            _wait_for_check_after_last_outage(log, timeout=90)
            assert daemon.poll() is None
        finally:
            code, _seconds = stop_gracefully(daemon)
        events = _events(log)
        assert problems == [], f"{len(problems)} differences, first {problems[:5]}"
        assert code == 0
        outages = _drift_outages(events)
        assert outages, "no restart met a running drift check"
        assert any(
            entry.get("event") in {"drift_checked", "drift_found"}
            for entry in events[outages[-1] + 1 :]
        ), "the drift check did not run again after the last outage"
        assert sim.stats().rate_limit_violations == 0
    finally:
        sim.stop()


def test_three_replicas_ride_out_a_restart_without_two_holders_at_any_moment(
    private_server: PrivateServer, tmp_path: Path
) -> None:
    """Issue 30: every replica loses its locks at once; they take the merchants again, and no
    sample of any replica's /metrics ever shows a merchant held by two of them."""
    warehouse_url, stop, start = private_server.url, private_server.stop, private_server.start
    config = SimConfig(
        merchant_id="m-fleet-restart",
        secret="fleet-restart-secret-0123456789abcdefghijk",
        seed=13,
        history_days=0.3,
        rounds_per_day=300,
        live_rate=5.0,
        record_requests=10,
    ).with_merchants(6)
    with running_simulator(config, live=True) as sim:
        chaos = Chaos(sim, warehouse_url, tmp_path, timing=TIMING)
        try:
            chaos.start()
            held_again, doubles = chaos.restart_server(stop, start, down=5.0)
            chaos.wait_balanced(60.0)
            chaos.finish()
            alive = [replica.alive for replica in chaos.members]
        finally:
            chaos.stop()
    print(f"\nevery merchant held again {held_again:.1f} s after the restart")  # noqa: T201
    assert doubles == []
    assert alive == [True, True, True]
    # Within the longest backoff between two failed ticks and a tick (30 s at the default tick,
    # where the backoff never grew that long in a 5 s outage).
    assert held_again < (BACKOFF_TICKS + 1) * TIMING.tick
