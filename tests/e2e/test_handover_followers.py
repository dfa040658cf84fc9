"""Requests handed to a daemon and the commands that follow them, when either side is killed
or interrupted: daemons and commands in processes of their own, on PostgreSQL (issue 35,
point 4 and the durable reset of point 6).

Before: a ``merchant reset`` killed with SIGKILL while its request waited (its holder
stopped) ran when the holder woke within the reset's start limit (20 s), re-anchoring for
nobody.  Now the command notes each look at its request (``followed_at``) and a holder starts
no reset, verify or resync whose command has not looked within ``FOLLOWED_WITHIN``.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.dbfixtures import SERVER_PARAMS
from support.fleetcheck import Replica, assert_truth, events, write_config
from support.synccheck import start_daemon, stop_gracefully, wait_for_log

from recordsync.fleet.member import DEFAULT_TICK
from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import HolderRequest, RequestState, Warehouse
from recordsync.warehouse.requests.book import FOLLOWED_WITHIN, unfollowed_reason

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
    state = warehouse.load_state(merchant_id)
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
        after = warehouse.load_state(merchant_id)
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
