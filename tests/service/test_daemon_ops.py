"""The daemon as operators see it: /metrics, /healthz, /readyz, JSON logs, signals, the lease
between two real daemons, status --check, and the drift check's alert."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update
from structlog.testing import capture_logs
from support.synccheck import (
    environment_for,
    settings_for,
    start_daemon,
    stop_gracefully,
    wait_for_log,
    wait_for_truth,
)

from recordsync.core.stopping import Stopper
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.sim import FaultRates, SimConfig, Simulator
from recordsync.warehouse import Warehouse, schema

pytestmark = pytest.mark.slow

MERCHANT = "m-ops"
SECRET = "ops-secret-0123456789abcdefghijklmnopqrstuvw"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(
        SimConfig(
            merchant_id=MERCHANT,
            secret=SECRET,
            seed=3,
            history_days=2.0,
            rounds_per_day=500,
            live_rate=10.0,
            record_requests=20,
            faults=FaultRates(projection_lag=0.05, server_error=0.03),
        )
    )
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def exported(
    exposition: str, name: str, labels: str = "", *, merchant_id: str | None = MERCHANT
) -> float:
    """A sample's value; ``labels`` as the exposition writes them, ``merchant_id`` added."""
    pairs = [*filter(None, labels.split(","))]
    if merchant_id is not None:
        pairs.append(f'merchant_id="{merchant_id}"')
    selector = "{" + ",".join(sorted(pairs)) + "}" if pairs else ""
    match = re.search(rf"^{re.escape(name + selector)} (\S+)$", exposition, re.MULTILINE)
    assert match, f"{name}{selector} not exported"
    return float(match.group(1))


def test_metrics_health_and_logs_of_a_running_daemon(sim: Simulator, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ops.db'}"
    port = free_port()
    log = tmp_path / "daemon.log"
    env = environment_for(sim, url, RECORDSYNC_HTTP_PORT=str(port))
    sim.start_live()
    daemon = start_daemon(env, log)
    try:
        wait_for_log(log, '"http_listening"')
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/healthz").status_code == 200
        sim.stop_live()
        assert wait_for_truth(sim, url, timeout=60) == []
        sim.step(20)  # changes only the tail can bring
        assert wait_for_truth(sim, url, timeout=30) == []
        time.sleep(1.5)  # one more empty poll: no backlog left
        ready = httpx.get(f"{base}/readyz")
        assert ready.status_code == 200, ready.text
        exposition = httpx.get(f"{base}/metrics").text
        (tmp_path / "metrics.txt").write_text(exposition)
    finally:
        code, seconds = stop_gracefully(daemon)
    assert code == 0
    assert seconds < 10

    def sample(name: str, labels: str = "") -> float:
        return exported(exposition, name, labels)

    assert sample("recordsync_pages_committed_total", 'source="rebuild"') > 0
    assert sample("recordsync_pages_committed_total", 'source="tail"') > 0
    assert sample("recordsync_records_written_total", 'outcome="written"') >= len(sim.truth())
    assert sample("recordsync_snapshot_windows_done", 'kind="rebuild"') == sample(
        "recordsync_snapshot_windows", 'kind="rebuild"'
    )
    assert sample("recordsync_rate_budget_requests") == 20
    assert sample("recordsync_tail_has_more") == 0
    assert sample("recordsync_tail_last_sequence") > 2**64
    assert 0 <= sample("recordsync_tail_freshness_seconds") < 30
    assert sample("recordsync_warehouse_write_duration_seconds_count") > 0
    records_ok = 'code="none",endpoint="records",status="200"'
    assert sample("recordsync_platform_requests_total", records_ok) > 0
    assert sample("recordsync_lease_held") == 1
    assert exported(exposition, "recordsync_merchants_held", merchant_id=None) == 1
    assert "recordsync_build_info{" in exposition

    # Every event is a JSON line with merchant_id and phase; no secret, no signature.
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert lines
    for event in lines:
        assert event["merchant_id"] == MERCHANT, event
        assert "phase" in event, event
    platform_events = [e for e in lines if e["event"] in {"platform_retry", "step_failed"}]
    assert platform_events, "the injected faults should have produced retries"
    assert all("request_id" in event for event in platform_events)
    text = log.read_text()
    assert SECRET not in text
    assert re.search(r"\b[0-9a-f]{64}\b", text) is None, "something that looks like a signature"


def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    slow = Simulator(
        SimConfig(
            merchant_id=MERCHANT,
            secret=SECRET,
            history_days=1,
            rounds_per_day=200,
            record_requests=20,
            faults=FaultRates(latency_ms=8000),
        )
    )
    slow.start()
    try:
        log = tmp_path / "daemon.log"
        env = environment_for(slow, f"sqlite:///{tmp_path / 'x.db'}", RECORDSYNC_HTTP_TIMEOUT="30")
        daemon = start_daemon(env, log)
        wait_for_log(log, '"merchant_sync_started"')  # the replica took the merchant
        time.sleep(1.5)  # a request is in flight for 8 s
        daemon.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert daemon.poll() is None, "the first signal waits for the page in hand"
        started = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=5)
        assert time.monotonic() - started < 4  # not the 6 s left of the request in hand
        assert code == 128 + signal.SIGTERM
        assert '"second_signal"' in log.read_text()
    finally:
        slow.stop()


def test_two_daemons_one_active_the_standby_takes_over_when_it_is_killed(
    sim: Simulator, warehouse_url: str, tmp_path: Path
) -> None:
    env = environment_for(sim, warehouse_url)
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = start_daemon(env, first_log)
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_for_log(first_log, '"lease_acquired"')
        second = start_daemon(env, second_log)
        wait_for_log(second_log, '"lease_waiting"')
        time.sleep(1.0)
        assert '"lease_acquired"' not in second_log.read_text()
        first.kill()
        first.wait()
        wait_for_log(second_log, '"lease_acquired"', timeout=20)
        sim.stop_live()
        assert wait_for_truth(sim, warehouse_url, timeout=60) == []
    finally:
        if first.poll() is None:
            first.kill()
        if second is not None:
            code, _ = stop_gracefully(second)
            assert code == 0
    assert sim.stats().rate_limit_violations == 0


def test_status_check_exits_0_when_syncing_and_1_otherwise(sim: Simulator, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    env = {**os.environ, **environment_for(sim, url)}

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "recordsync", "status", "--check"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )

    before = check()
    assert before.returncode == 1, before.stdout + before.stderr
    assert before.stdout.startswith("not ready")
    daemon = start_daemon(environment_for(sim, url), tmp_path / "daemon.log")
    try:
        assert wait_for_truth(sim, url, timeout=60) == []
        running = check()
        assert running.returncode == 0, running.stdout + running.stderr
        assert running.stdout.startswith("ready")
    finally:
        stop_gracefully(daemon)


def test_the_drift_check_reports_a_row_behind_and_changes_nothing(
    sim: Simulator, tmp_path: Path
) -> None:
    sim.set_faults(FaultRates())
    url = f"sqlite:///{tmp_path / 'drift.db'}"
    with MerchantCommand(settings_for(sim, url), None, Stopper(), stop_when_caught_up=True) as app:
        assert app.tail.run()
    # Lower one revision of yesterday's rows behind the engine's back.
    warehouse = Warehouse.connect(url)
    state = warehouse.state.load_state(MERCHANT)
    assert state is not None
    assert state.last_projection_as_of is not None
    rows = warehouse.records.fetch_records(MERCHANT)
    yesterday = [
        row
        for row in rows.values()
        if row["revision"] >= 2
        and (state.last_projection_as_of.date() - row["created_at"].date()).days == 1
    ]
    assert yesterday, "the simulator should have settled rounds yesterday"
    victim = yesterday[0]
    with warehouse.engine.begin() as connection:
        connection.execute(
            update(schema.records)
            .where(schema.records.c.record_id == victim["record_id"])
            .values(revision=victim["revision"] - 1)
        )
    stopper = Stopper()
    with (
        capture_logs() as logs,
        MerchantCommand(settings_for(sim, url, drift_check_interval=0.5), None, stopper) as app,
    ):
        timer = threading.Timer(4.0, stopper.stop)
        timer.start()
        app.tail.run()
        timer.cancel()
    found = [entry for entry in logs if entry["event"] == "drift_found"]
    assert found, [entry["event"] for entry in logs]
    assert found[0]["behind"] == 1
    assert found[0]["log_level"] == "error"
    # An alert, not a silent fix.
    assert (
        warehouse.records.fetch_records(MERCHANT)[victim["record_id"]]["revision"]
        == victim["revision"] - 1
    )
    warehouse.close()
