"""A command that holds a merchant's lease itself obeys a pause within a tick, and a paused
merchant sees no request from a plain ``verify`` either.

Before: a ``backfill`` (or ``resync``, ``verify --repair``) run here read on to its end
through a pause, and a plain ``verify`` of a paused merchant took the lease and read the
platform, although the docs said "the platform sees no request for it"."""

from __future__ import annotations

import contextlib
import io
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
import structlog
from support.dbfixtures import BACKEND_PARAMS
from support.fleetcheck import holders, write_config

from recordsync import cli, logs
from recordsync.sim import SimConfig, Simulator
from recordsync.sim.config import FaultRates
from recordsync.warehouse import Warehouse

pytestmark = pytest.mark.slow

TICK = 2.0  # the fleet's tick (pause_watch.LOOK_EVERY)


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def recordsync_cli(config: Path, *args: str) -> Ran:
    """The CLI's main in this process (as tests/e2e/test_control.py runs it), its output
    captured and what it set process-wide put back."""
    out, err = io.StringIO(), io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["--config", str(config), *args])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        logs.reset_logging()
        structlog.reset_defaults()
    return Ran(code, out.getvalue(), err.getvalue())


def merchant(config: Path, *args: str) -> Ran:
    return recordsync_cli(config, "merchant", *args)


def slow_simulator(seed: int) -> Simulator:
    """A day of history read slowly: a backfill of it takes well over the few seconds the
    test needs to pause it in the middle."""
    return Simulator(
        SimConfig(
            merchant_id="paused",
            secret="pause-secret-0123456789abcdefghijklmnopqrstu",
            seed=seed,
            history_days=1.0,
            rounds_per_day=4000,
            record_requests=4,
            faults=FaultRates(records_latency_ms=150),
        )
    )


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
def test_a_backfill_run_here_stops_within_a_tick_of_a_pause_and_resumes_after(
    warehouse_url: str, tmp_path: Path
):
    sim = slow_simulator(seed=71)
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml")
    (merchant_id,) = sim.merchant_ids
    end = sim.now().replace(minute=0, second=0, microsecond=0)
    span = ["--from", (end - timedelta(days=1)).isoformat(), "--to", end.isoformat()]
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    backfill = subprocess.Popen(  # noqa: S603 - our own CLI, a process of its own
        [sys.executable, "-m", "recordsync", "--config", str(config), "backfill", *span],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: merchant_id in holders(warehouse), 30.0, "the backfill holds it")
        wait_for(lambda: warehouse.records.fetch_records(merchant_id), 30.0, "a page committed")
        paused = merchant(config, "pause", merchant_id, "--reason", "INC-9")
        paused_at = time.monotonic()
        assert paused.returncode == 0, paused.stdout + paused.stderr
        assert "no replica syncs it (its holder let go after" in paused.stdout
        _, stderr = backfill.communicate(timeout=30)
        assert backfill.returncode == 1, stderr[-2000:]
        last = stderr.strip().splitlines()[-1]
        assert last.startswith(
            f"recordsync: error: backfill stopped: merchant {merchant_id} was paused while it "
            "ran (since "
        ), last
        assert "INC-9" in last
        assert "run the same command again to resume" in last
        assert "Traceback" not in stderr
        assert time.monotonic() - paused_at < 15.0  # a tick and the page in hand, not the job
        requests = sim.stats(merchant_id).total_requests
        time.sleep(TICK * 1.5)
        assert sim.stats(merchant_id).total_requests == requests  # nothing while paused
        stored = len(warehouse.records.fetch_records(merchant_id))
        truth = [
            record_id
            for record_id, record in sim.truth(merchant_id).items()
            if span[1] <= record["created_at"] < span[3]
        ]
        assert 0 < stored < len(truth)  # stopped in the middle

        assert merchant(config, "resume", merchant_id).returncode == 0
        again = recordsync_cli(config, "backfill", *span)
        assert again.returncode == 0, again.stderr[-2000:]
        assert set(truth) <= set(warehouse.records.fetch_records(merchant_id))
    finally:
        if backfill.poll() is None:
            backfill.kill()
            backfill.wait()
        sim.stop()
        warehouse.close()
    assert sim.stats().rate_limit_violations == 0


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
@pytest.mark.parametrize("repair", [False, True], ids=["verify", "verify-repair"])
def test_a_verify_of_a_paused_merchant_is_refused_and_sends_no_request(
    warehouse_url: str, tmp_path: Path, repair: bool
):
    sim = slow_simulator(seed=72)
    sim.start()
    try:
        config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml")
        (merchant_id,) = sim.merchant_ids
        assert recordsync_cli(config, "migrate").returncode == 0
        assert merchant(config, "pause", merchant_id).returncode == 0
        end = sim.now()
        span = ["--from", (end - timedelta(hours=2)).isoformat(), "--to", end.isoformat()]
        what = "verify --repair" if repair else "verify"
        for dry_run in ([], ["--dry-run"]):
            before = sim.stats(merchant_id).total_requests
            args = ["verify", *span, *(["--repair"] if repair else []), *dry_run]
            done = recordsync_cli(config, *args)
            assert done.returncode == 3, done.stdout + done.stderr  # verify: it concluded nothing
            lines = done.stderr.strip().splitlines()
            assert lines[-1].startswith(
                f"recordsync: error: {what}: merchant {merchant_id} is paused"
            )
            assert "Traceback" not in done.stderr
            assert sim.stats(merchant_id).total_requests == before  # not one request
    finally:
        sim.stop()
