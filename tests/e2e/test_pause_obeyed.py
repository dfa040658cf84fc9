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
from support.fleettiming import QUICK

from recordsync import cli, logs
from recordsync.sim import SimConfig, Simulator
from recordsync.sim.config import FaultRates
from recordsync.warehouse import Warehouse

pytestmark = pytest.mark.slow

# The commands' tick and lease (``fleettiming``): a command holding the lease looks for a pause
# once a tick (``pause_watch``).
TIMING = QUICK
TICK = TIMING.tick


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


def started_over_a_day(
    sim: Simulator, warehouse_url: str, path: Path
) -> tuple[Path, str, list[str]]:
    """``sim`` serving its one merchant: the config written to ``path``, the merchant and the
    arguments of the last whole day before now (``--from``, ``--to``)."""
    sim.start()
    config = write_config(sim, warehouse_url, path, *TIMING.toml_lines())
    (merchant_id,) = sim.merchant_ids
    end = sim.now().replace(minute=0, second=0, microsecond=0)
    return (
        config,
        merchant_id,
        ["--from", (end - timedelta(days=1)).isoformat(), "--to", end.isoformat()],
    )


def cli_process(config: Path, *args: str) -> subprocess.Popen[str]:
    """``recordsync --config CONFIG ARGS`` in a process of its own, its output piped."""
    return subprocess.Popen(  # noqa: S603 - our own CLI, a process of its own
        [sys.executable, "-m", "recordsync", "--config", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def paused_in_the_middle(
    config: Path, sim: Simulator, running: subprocess.Popen[str], *, what: str, code: int
) -> str:
    """Pause the merchant that ``running`` (the command ``what``) holds: it lets go within a
    tick and the page in hand, ends with ``code`` and one last line saying it was paused
    (returned), and the platform sees no request for the merchant after it."""
    (merchant_id,) = sim.merchant_ids
    paused = merchant(config, "pause", merchant_id, "--reason", "INC-9")
    paused_at = time.monotonic()
    assert paused.returncode == 0, paused.stdout + paused.stderr
    assert "no replica syncs it (its holder let go after" in paused.stdout
    _, stderr = running.communicate(timeout=30)
    assert running.returncode == code, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"recordsync: error: {what} stopped: merchant {merchant_id} was paused while it ran (since "
    ), last
    assert "INC-9" in last
    assert "Traceback" not in stderr
    assert time.monotonic() - paused_at < 15.0  # a tick and the page in hand, not the job
    requests = sim.stats(merchant_id).total_requests
    time.sleep(TICK * 1.5)
    assert sim.stats(merchant_id).total_requests == requests  # nothing while paused
    return last


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
def test_a_backfill_run_here_stops_within_a_tick_of_a_pause_and_resumes_after(
    warehouse_url: str, tmp_path: Path
):
    sim = slow_simulator(seed=71)
    config, merchant_id, span = started_over_a_day(sim, warehouse_url, tmp_path / "recordsync.toml")
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    backfill = cli_process(config, "backfill", *span)
    try:
        wait_for(lambda: merchant_id in holders(warehouse), 30.0, "the backfill holds it")
        wait_for(lambda: warehouse.records.fetch_records(merchant_id), 30.0, "a page committed")
        last = paused_in_the_middle(config, sim, backfill, what="backfill", code=1)
        assert "run the same command again to resume" in last
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


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
@pytest.mark.parametrize("repair", [False, True], ids=["verify", "verify-repair"])
def test_a_verify_run_here_stops_within_a_tick_of_a_pause_and_concludes_nothing(
    warehouse_url: str, tmp_path: Path, repair: bool
):
    """``verify`` watches the pause on its own (``backfill`` and ``resync`` share theirs):
    held here, paused in the middle of its reads, it lets go within a tick, sends nothing more
    and exits 3, having concluded nothing, instead of reading on to its end."""
    sim = slow_simulator(seed=73)
    config, merchant_id, span = started_over_a_day(sim, warehouse_url, tmp_path / "recordsync.toml")
    what = "verify --repair" if repair else "verify"
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    verify = cli_process(config, "verify", *span, *(["--repair"] if repair else []))
    try:
        wait_for(lambda: merchant_id in holders(warehouse), 30.0, f"the {what} holds it")
        wait_for(lambda: sim.stats(merchant_id).count("records") >= 2, 30.0, "pages read")
        last = paused_in_the_middle(config, sim, verify, what=what, code=3)
        assert "nothing was concluded" in last
        assert merchant_id not in holders(warehouse)
    finally:
        if verify.poll() is None:
            verify.kill()
            verify.wait()
        sim.stop()
        warehouse.close()
    assert sim.stats().rate_limit_violations == 0
