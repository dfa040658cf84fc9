"""The daemon as a real process: kill -9 at random points, restarts, signals, exit codes.

Invariant 1 of the product, shown directly: rows and the cursor that covers them commit in
one transaction, so killing the process at any instant and starting it again ends with the
same warehouse as an uninterrupted run.  The platform adds members to the records (a
30-digit decimal and a nested object), so the members kept with each row (``extra_fields``)
are part of what must end equal.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.synccheck import (
    environment_for,
    start_daemon,
    stop_gracefully,
    wait_for_log,
    wait_for_truth,
)

from recordsync.sim import AddedField, FaultRates, SimConfig, Simulator
from recordsync.warehouse import Warehouse

pytestmark = pytest.mark.slow

MERCHANT = "m-proc"
SECRET = "proc-secret-0123456789abcdefghijklmnopqrstu"
FAULTS = FaultRates(
    projection_lag=0.05,
    rate_limited=0.02,
    server_error=0.05,
    connection_reset=0.03,
    duplicates=0.5,
    extra_fields=0.2,
)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(
        SimConfig(
            merchant_id=MERCHANT,
            secret=SECRET,
            seed=23,
            history_days=2.5,
            rounds_per_day=700,
            live_rate=30.0,
            record_requests=20,
            record_seconds=1,
            added_fields=(AddedField("tax", "decimal"), AddedField("jackpot", "object")),
        )
    )
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()


def test_killed_with_sigkill_at_random_points_then_restarted_ends_equal_to_the_truth(
    sim: Simulator, warehouse_url: str, tmp_path: Path
) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    log = tmp_path / "daemon.log"
    env = environment_for(sim, warehouse_url, RECORDSYNC_PAGE_SIZE="50")
    sim.set_faults(FAULTS)
    sim.start_live()
    kills = 0
    for _ in range(4):
        daemon = start_daemon(env, log)
        # Past the one-window cold start, then anywhere in the snapshot or the tail.
        time.sleep(rng.uniform(1.2, 4.0))
        daemon.kill()
        daemon.wait()
        kills += 1
    sim.stop_live()
    sim.set_faults(FaultRates())
    daemon = start_daemon(env, log)
    try:
        problems = wait_for_truth(sim, warehouse_url, timeout=90)
    finally:
        code, seconds = stop_gracefully(daemon)
    output = log.read_text()
    assert problems == [], f"seed {seed}: {len(problems)} differences, first {problems[:5]}"
    assert kills >= 3
    assert code == 0, output[-2000:]
    assert seconds < 10
    stats = sim.stats()
    assert stats.rate_limit_violations == 0, f"seed {seed}"
    assert stats.auth_failures == 0
    assert SECRET not in output


def test_sigterm_mid_snapshot_exits_zero_quickly_and_a_restart_resumes(
    sim: Simulator, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'term.db'}"
    log = tmp_path / "daemon.log"
    env = environment_for(sim, url, RECORDSYNC_PAGE_SIZE="20")
    daemon = start_daemon(env, log)
    wait_for_log(log, '"lease_acquired"')
    time.sleep(2.5)
    code, seconds = stop_gracefully(daemon)
    assert code == 0, log.read_text()[-2000:]
    assert seconds < 10
    warehouse = Warehouse.connect(url)
    try:
        status = warehouse.records.status(MERCHANT)
        assert status.state is not None
        first_run_rows = status.records
        assert first_run_rows > 0
    finally:
        warehouse.close()
    daemon = start_daemon(env, log)
    try:
        assert wait_for_truth(sim, url, timeout=60) == []
    finally:
        stop_gracefully(daemon)
    assert '"event": "state_loaded"' in log.read_text()


def test_configuration_errors_exit_2_with_one_line_per_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECORDSYNC_")}
    env["RECORDSYNC_HTTP_PORT"] = "not-a-port"
    result = subprocess.run(
        [sys.executable, "-m", "recordsync", "run"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        (
            "recordsync: configuration: RECORDSYNC_BASE_URL: required (the platform base URL, "
            "e.g. https://host)"
        ),
        (
            "recordsync: configuration: RECORDSYNC_SECRET or RECORDSYNC_SECRET_FILE: one is "
            "required (the platform secret)"
        ),
        "recordsync: configuration: RECORDSYNC_MERCHANT_ID: required (sent as X-Merchant-Id)",
        "recordsync: configuration: RECORDSYNC_HTTP_PORT: 'not-a-port' is not a port 0-65535",
    ]


def test_first_start_without_history_from_says_so(sim: Simulator, tmp_path: Path) -> None:
    env = environment_for(sim, f"sqlite:///{tmp_path / 'h.db'}")
    del env["RECORDSYNC_HISTORY_FROM"]
    log = tmp_path / "daemon.log"
    daemon = start_daemon(
        env, log, "backfill", "--from", "2026-01-01T00:00:00Z", "--to", "2025-01-01T00:00:00Z"
    )
    assert daemon.wait(timeout=30) == 2
    assert "--from must be earlier than --to" in log.read_text()


def test_status_json_reports_the_state_for_scripts(sim: Simulator, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    env = environment_for(sim, url)
    daemon = start_daemon(env, tmp_path / "daemon.log")
    try:
        assert wait_for_truth(sim, url, timeout=60) == []
    finally:
        stop_gracefully(daemon)
    result = subprocess.run(
        [sys.executable, "-m", "recordsync", "status", "--json"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    import json  # noqa: PLC0415

    (report,) = json.loads(result.stdout)["merchants"]
    assert report["status"]["records"] == len(sim.truth())
    assert report["status"]["state"]["phase"] == "tailing"
    assert SECRET not in result.stdout
    csv_report = subprocess.run(
        [sys.executable, "-m", "recordsync", "report", "--by", "currency", "--format", "csv"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    header, *rows = csv_report.stdout.strip().splitlines()
    assert header.startswith("currency,rounds,")
    rounds = sum(int(row.split(",")[1]) for row in rows)
    assert 0 < rounds <= len(sim.truth())
