"""One stream: in JSON mode every line a real ``recordsync run`` writes, on stdout and on
stderr, is a JSON object, whoever wrote it: our events, uvicorn's (a malformed request to the
notification port) and the fencing of the snapshot workers (another holder raised the
merchant's epoch while the daemon was writing), which reaches no scheduler's report."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.synccheck import environment_for, stop_gracefully

from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import Warehouse
from recordsync.warehouse.lease.epochs import raise_epoch

pytestmark = pytest.mark.slow

MERCHANT = "m-stream"
SECRET = "stream-secret-0123456789abcdefghijklmnopqr"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def records(warehouse: Warehouse) -> int:
    try:
        return warehouse.records.status(MERCHANT).records
    except Exception:  # noqa: BLE001 - not migrated yet
        return 0


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every non-empty line of ``path``, each of which must be one JSON object."""
    events = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                pytest.fail(f"{path.name} line {number} is not JSON: {line!r}")
    return events


@pytest.mark.parametrize("warehouse_url", ["postgres"], indirect=True)
def test_every_line_of_a_daemon_is_json_whoever_wrote_it(
    warehouse_url: str, tmp_path: Path
) -> None:
    sim = Simulator(
        SimConfig(
            merchant_id=MERCHANT,
            secret=SECRET,
            seed=29,
            history_days=2.0,
            rounds_per_day=2000,
            live_rate=0.0,
            record_requests=10,
            record_seconds=1,
        )
    )
    sim.start()
    port = free_port()
    env = environment_for(
        sim,
        warehouse_url,
        RECORDSYNC_PAGE_SIZE="20",
        # The tail reads once, then waits: the snapshot workers (APScheduler jobs) are the
        # ones writing when the epoch goes up.
        RECORDSYNC_POLL_INTERVAL="60",
        RECORDSYNC_EVENTS_PORT=str(port),
        RECORDSYNC_EVENTS_HOST="127.0.0.1",
    )
    out, err = tmp_path / "stdout", tmp_path / "stderr"

    def written() -> str:
        return out.read_text() + err.read_text()

    warehouse = Warehouse.connect(warehouse_url)
    with out.open("wb") as stdout, err.open("wb") as stderr:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "recordsync", "run"],
            env={**os.environ, **env},
            stdout=stdout,
            stderr=stderr,
        )
    try:
        wait_until(lambda: "snapshot_started" in written(), "the snapshot")
        wait_until(lambda: records(warehouse) > 0, "a first page")
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            assert conn.recv(1024).startswith(b"HTTP/1.1 400")
        # What a new holder does on taking the merchant over (a paused holder's successor).
        with warehouse.engine.begin() as transaction:
            raise_epoch(transaction, MERCHANT, "another-replica")
        wait_until(lambda: "lease_superseded" in written(), "the fenced-off sync")
        wait_until(lambda: "Invalid HTTP request" in written(), "uvicorn's line")
    finally:
        code, _seconds = stop_gracefully(daemon)
        warehouse.close()
        sim.stop()
    events = json_lines(out) + json_lines(err)
    assert code == 0
    by_logger = {event.get("logger"): event for event in events}
    uvicorn = by_logger["uvicorn.error"]
    assert (uvicorn["event"], uvicorn["level"]) == ("Invalid HTTP request received.", "warning")
    # The snapshot workers' fencing error goes to their generation (sync.jobs), never to
    # APScheduler's own report of a job's exception: one event of ours, no scheduler line.
    assert not [event for event in events if "raised an exception" in event["event"]]
    assert "lease_superseded" in {event["event"] for event in events}
    assert "fenced_write_refused" in {event["event"] for event in events}
    assert SECRET not in written()
