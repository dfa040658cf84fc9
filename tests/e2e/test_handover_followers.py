"""Requests handed to a daemon and the commands that follow them, when either side is killed
or interrupted: daemons and commands in processes of their own, on PostgreSQL.

Also the two paths of a hand-over that a kill or a Ctrl-C takes mid-way: a reset whose holder
is killed after it started it is carried on once by the next holder (from the note in its
row); a running verify whose command is interrupted is stopped by its holder at its next look.

Before: a ``merchant reset`` killed with SIGKILL while its request waited (its holder
stopped) ran when the holder woke within the reset's start limit (20 s), re-anchoring for
nobody.  Now the command notes each look at its request (``followed_at``) and a holder starts
no reset, verify or resync whose command has not looked within ``FOLLOWED_WITHIN``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from support.dbfixtures import SERVER_PARAMS
from support.fleetcheck import Replica, assert_truth, events, write_config
from support.synccheck import start_daemon, stop_gracefully, wait_for_log

from recordsync.fleet.member import DEFAULT_TICK
from recordsync.service.daemon.requested_work import POLL
from recordsync.sim import SimConfig, Simulator
from recordsync.sim.config import FaultRates
from recordsync.warehouse import HolderRequest, RequestState, Warehouse
from recordsync.warehouse.requests.book import (
    CANCELLED_REASON,
    FOLLOWED_WITHIN,
    unfollowed_reason,
)

pytestmark = pytest.mark.slow

ON_POSTGRES = pytest.mark.parametrize("warehouse_url", SERVER_PARAMS[:1], indirect=True)


def simulator(seed: int) -> Simulator:
    """One merchant, 3 000 records: synced in seconds; ``set_faults`` slows it afterwards."""
    return Simulator(
        SimConfig(
            merchant_id="follow",
            secret="follower-secret-0123456789abcdefghijklmnopq",
            seed=seed,
            history_days=1.0,
            rounds_per_day=3000,
            live_rate=3.0,
            record_requests=10,
        ).with_merchants(1)
    )


def command(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``recordsync --config CONFIG ARGS`` in a process of its own, its output in ``log``."""
    return start_daemon({}, log, "--config", str(config), *args)


def first(log: Path, name: str) -> dict[str, object]:
    found = [e for e in events(log) if e.get("event") == name]
    assert found, (name, [e.get("event") for e in events(log)][-30:])
    return found[0]


def request_of(warehouse: Warehouse, log: Path, handed_over: str) -> int:
    """The request a command handed over, once it says so (``<kind>_handed_over``)."""
    wait_for_log(log, f'"{handed_over}"', timeout=30)
    return int(str(first(log, handed_over)["request_id"]))


def wait_until(
    warehouse: Warehouse, request_id: int, done: set[RequestState], timeout: float
) -> HolderRequest:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        request = warehouse.requests.get(request_id)
        assert request is not None
        if request.state in done:
            return request
        time.sleep(0.1)
    raise AssertionError(f"request {request_id} not {done} within {timeout} s: {request}")


def synced_daemon(
    sim: Simulator, warehouse: Warehouse, config: Path, log: Path
) -> tuple[Replica, int]:
    """A daemon holding the merchant, its history in the warehouse; the rebuild count."""
    daemon = Replica(config, log)
    (merchant_id,) = sim.merchant_ids
    assert_truth(warehouse, sim, [merchant_id])
    state = warehouse.state.load_state(merchant_id)
    assert state is not None
    return daemon, state.rebuilds


@ON_POSTGRES
def test_a_reset_whose_command_was_killed_never_runs_at_a_holder_that_wakes_later(
    warehouse_url: str, tmp_path: Path
):
    """The holder SIGSTOPped (it cannot start the reset), the command SIGKILLed once it has
    handed the reset over, the holder SIGCONTed past ``FOLLOWED_WITHIN`` but well within the
    reset's start limit: the request fails "its command is gone", no re-anchor."""
    sim = simulator(81)
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml")
    (merchant_id,) = sim.merchant_ids
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    daemon, rebuilds = synced_daemon(sim, warehouse, config, tmp_path / "daemon.log")
    reset: subprocess.Popen[bytes] | None = None
    try:
        daemon.process.send_signal(signal.SIGSTOP)
        reset_log = tmp_path / "reset.log"
        reset = command(config, reset_log, "merchant", "reset", merchant_id, "--yes")
        request_id = request_of(warehouse, reset_log, "reset_handed_over")
        reset.send_signal(signal.SIGKILL)
        assert reset.wait(timeout=10) == -signal.SIGKILL
        killed = warehouse.requests.get(request_id)
        assert killed is not None
        assert killed.state is RequestState.PENDING  # nothing cancelled it
        time.sleep(FOLLOWED_WITHIN.total_seconds() + 2)
        daemon.process.send_signal(signal.SIGCONT)
        ended = wait_until(warehouse, request_id, {RequestState.FAILED, RequestState.DONE}, 15)
        assert (ended.state, ended.error) == (RequestState.FAILED, unfollowed_reason())
        time.sleep(2 * DEFAULT_TICK)  # its watcher looked again: nothing to run
        after = warehouse.state.load_state(merchant_id)
        assert after is not None
        assert after.rebuilds == rebuilds  # never re-anchored for nobody
        names = {str(e.get("event")) for e in events(daemon.log)}
        assert "requests_unfollowed" in names
        assert "requested_reset_started" not in names
        assert "rebuild_started" not in names
    finally:
        daemon.process.send_signal(signal.SIGCONT)
        if reset is not None and reset.poll() is None:
            reset.kill()
        stop_gracefully(daemon.process)
        sim.stop()
        warehouse.close()


def at(event: dict[str, object]) -> float:
    return datetime.fromisoformat(str(event["timestamp"])).timestamp()


def span(sim: Simulator) -> tuple[str, ...]:
    end = sim.now().replace(microsecond=0)
    return ("--from", (end - timedelta(days=1, hours=1)).isoformat(), "--to", end.isoformat())


@ON_POSTGRES
def test_a_reset_whose_holder_is_killed_mid_way_is_carried_on_once_by_the_next(
    warehouse_url: str, tmp_path: Path
):
    """The durable reset: D1 started it and noted the rebuild count (every request slowed, so
    its re-anchor takes seconds), D1 SIGKILLed, D2 started: D2 carries the same reset on from
    the note, the merchant is rebuilt exactly once, the command ends with its line, exit 0."""
    sim = simulator(82)
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml")
    (merchant_id,) = sim.merchant_ids
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    d1, rebuilds = synced_daemon(sim, warehouse, config, tmp_path / "d1.log")
    d2: Replica | None = None
    reset: subprocess.Popen[bytes] | None = None
    try:
        sim.set_faults(FaultRates(latency_ms=1500.0))
        reset_log = tmp_path / "reset.log"
        reset = command(config, reset_log, "merchant", "reset", merchant_id, "--yes")
        request_id = request_of(warehouse, reset_log, "reset_handed_over")
        wait_for_log(d1.log, '"requested_reset_started"', timeout=15)
        noted = wait_for_note(warehouse, request_id)
        assert noted == {"rebuilds_before": rebuilds}
        d1.kill()
        d2 = Replica(config, tmp_path / "d2.log")
        assert reset.wait(timeout=60) == 0, reset_log.read_text()[-2000:]
        last = reset_log.read_text().strip().splitlines()[-1]
        assert last.startswith(f"merchant {merchant_id} reset: re-anchored at "), last
        assert "by replica" in last, last
        d1_names = {str(e.get("event")) for e in events(d1.log)}
        assert not d1_names & {"requested_reset_finished", "rebuild_started"}  # killed first
        d2_names = [str(e.get("event")) for e in events(d2.log)]
        assert "requested_reset_started" in d2_names
        assert "requested_reset_finished" in d2_names
        done = warehouse.requests.get(request_id)
        assert done is not None
        assert done.state is RequestState.DONE
        assert done.holder is not None
        assert done.holder in str(first(d2.log, "replica_joined"))
        time.sleep(2 * DEFAULT_TICK)  # D2's watcher looked again: nothing more to run
        after = warehouse.state.load_state(merchant_id)
        assert after is not None
        assert after.rebuilds == rebuilds + 1  # once: not again at D2 on top of D1's
        assert d2_names.count("rebuild_started") == 1
    finally:
        sim.set_faults(FaultRates())
        if reset is not None and reset.poll() is None:
            reset.kill()
        if d1.process.poll() is None:
            d1.kill()
        if d2 is not None:
            stop_gracefully(d2.process)
        sim.stop()
        warehouse.close()


def wait_for_note(warehouse: Warehouse, request_id: int) -> object:
    """The progress a running reset noted in its request (its rebuild count before it)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        request = warehouse.requests.get(request_id)
        if request is not None and request.result is not None:
            return json.loads(request.result)
        time.sleep(0.02)
    raise AssertionError(f"request {request_id} noted nothing")


@ON_POSTGRES
def test_a_running_verify_is_stopped_by_its_holder_within_a_poll_of_its_command_interrupted(
    warehouse_url: str, tmp_path: Path
):
    """A verify running at the daemon (records slowed: it would run for many seconds), its
    command SIGINTed: exit 130 with the "cancelled" line, the request cancelled, and the
    holder stops the verify within one poll of the cancel (``requested_verify_ended``)."""
    sim = simulator(83)
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml")
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    daemon, _rebuilds = synced_daemon(sim, warehouse, config, tmp_path / "daemon.log")
    verify: subprocess.Popen[bytes] | None = None
    try:
        sim.set_faults(FaultRates(records_latency_ms=500.0))  # 30 pages: 15 s or more
        verify_log = tmp_path / "verify.log"
        verify = command(config, verify_log, "verify", *span(sim))
        request_id = request_of(warehouse, verify_log, "verify_handed_over")
        wait_for_log(daemon.log, '"requested_verify_started"', timeout=15)
        time.sleep(1.0)  # a page or two compared
        running = warehouse.requests.get(request_id)
        assert running is not None
        assert running.state is RequestState.RUNNING
        verify.send_signal(signal.SIGINT)
        assert verify.wait(timeout=30) == 130, verify_log.read_text()[-2000:]
        text = verify_log.read_text()
        assert "Traceback" not in text
        last = text.strip().splitlines()[-1]
        assert last.startswith("recordsync: interrupted by SIGINT: "), last
        assert f"request {request_id} cancelled: its holder stops it" in last, last
        cancelled = at(first(verify_log, "verify_cancelled"))
        wait_for_log(daemon.log, '"requested_verify_ended"', timeout=2 * POLL + 5)
        ended = first(daemon.log, "requested_verify_ended")
        assert ended["request_id"] == request_id
        assert ended["action"] == "cancelled or ended by its command: stopped here"
        took = at(ended) - cancelled
        print(f"the holder stopped the verify {took:.2f} s after the cancel")  # noqa: T201
        assert took <= POLL + 1.0  # its next look, and the page in flight (0.5 s)
        final = warehouse.requests.get(request_id)
        assert final is not None
        assert (final.state, final.error) == (RequestState.CANCELLED, CANCELLED_REASON)
        names = {str(e.get("event")) for e in events(daemon.log)}
        assert "requested_verify_finished" not in names
    finally:
        sim.set_faults(FaultRates())
        if verify is not None and verify.poll() is None:
            verify.kill()
        stop_gracefully(daemon.process)
        sim.stop()
        warehouse.close()
