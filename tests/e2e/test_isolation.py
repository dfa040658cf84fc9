"""One merchant's or one feature's failure never slows another's tail: a real
``recordsync run`` process syncing many merchants of one simulator, whose platform refuses
some of their secrets, or refuses and stalls the game catalogue while every drift check
crawls.  Every healthy tail keeps its poll interval, counted by the simulator."""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, pool, text
from support.dbfixtures import fresh_database
from support.synccheck import differences, start_daemon, stop_gracefully

from recordsync.core.state import Phase
from recordsync.sim import FaultRates, Refusal, SimConfig, Simulator, running_simulator

pytestmark = pytest.mark.slow

POLL = 1.0
WRONG_SECRET = "w" * 43
CATCH_UP = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(sim: Simulator, url: str, path: Path, port: int, *extra: str) -> Path:
    history_from = sim.now() - timedelta(days=sim.config.history_days + 1)
    lines = [
        f'base_url = "{sim.base_url}"',
        f'database_url = "{url}"',
        f'history_from = "{history_from.isoformat()}"',
        f"http_port = {port}",
        f"poll_interval = {POLL}",
        "snapshot_concurrency = 2",
        'log_format = "json"',
        *extra,
    ]
    for profile in sim.config.profiles:
        lines += ["[[merchants]]", f'merchant_id = "{profile.merchant_id}"']
        lines += [f'secret = "{profile.secret}"']
    path.write_text("\n".join(lines) + "\n")
    return path


class Warehouse:
    """The test's own reads of the daemon's warehouse: cheap queries on one connection."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")

    def sequences(self) -> dict[str, str]:
        """merchant -> the last change sequence committed, of merchants that tail."""
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(
                    text("SELECT merchant_id, last_sequence FROM sync_state WHERE phase = :p"),
                    {"p": Phase.TAILING.value},
                ).all()
        except Exception:  # noqa: BLE001 - not migrated yet
            return {}
        return {merchant: sequence or "0" for merchant, sequence in rows}


@contextmanager
def daemon(config: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    process = start_daemon({}, log, "--config", str(config), "run")
    try:
        yield process
        code, _seconds = stop_gracefully(process)
        assert code == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def wait_until(condition: Callable[[], bool], timeout: float, process, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"timed out:\n{log.read_text()[-3000:]}"
        time.sleep(0.25)


def polls(sim: Simulator, merchants: list[str]) -> dict[str, int]:
    return {merchant: sim.stats(merchant).count("record-changes") for merchant in merchants}


def per_merchant(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {merchant: after[merchant] - before[merchant] for merchant in before}


def gauge(port: int, name: str) -> dict[str, float]:
    """The gauge's value per merchant; nothing while the daemon does not listen yet."""
    try:
        body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    except httpx.TransportError:
        return {}
    return {
        sample.labels["merchant_id"]: sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == name
    }


def log_events(log: Path, event: str) -> list[dict]:
    found = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry["event"] == event:
                found.append(entry)
    return found


def test_merchants_whose_secret_is_refused_retry_alone_and_the_others_keep_their_interval(
    tmp_path,
):
    """20 merchants tailing, then the platform refuses the secrets of 10 (rotated at the
    platform, the files not yet): the other 10 poll every second as before (it was 0 polls
    a second with the tails on the pool that the refused ones slept in), the refused ones
    try once and then wait out their own backoff."""
    config = SimConfig(history_days=0.05, rounds_per_day=2000).with_merchants(20)
    window = 20.0
    with (
        running_simulator(config) as sim,
        fresh_database("postgres", tmp_path) as url,
    ):
        merchants = list(sim.merchant_ids)
        refused, healthy = merchants[:10], merchants[10:]
        log = tmp_path / "daemon.log"
        conf = write_config(
            sim, url, tmp_path / "c.toml", 0, "catalogue_interval = 0", "drift_check_interval = 0"
        )
        warehouse = Warehouse(url)
        with daemon(conf, log) as process:
            wait_until(lambda: len(warehouse.sequences()) == 20, CATCH_UP, process, log)
            for merchant in refused:
                sim.rotate_secret(merchant, WRONG_SECRET)
                sim.retire_secret(merchant)
            time.sleep(3 * POLL)  # each refused tail meets its 401
            before = polls(sim, merchants)
            time.sleep(window)
            counted = per_merchant(before, polls(sim, merchants))
        warehouse.engine.dispose()
        stats = {merchant: sim.stats(merchant) for merchant in merchants}
    slowest = min(counted[merchant] for merchant in healthy)
    assert slowest >= 0.9 * window / POLL, counted
    assert sum(counted[merchant] for merchant in healthy) >= 0.9 * len(healthy) * window / POLL
    assert [counted[merchant] for merchant in refused] == [0] * len(refused)
    for merchant in refused:  # one 401 each, then the fatal backoff of 300 s
        assert stats[merchant].count("record-changes", 401) == 1, merchant
    assert all(stats[merchant].auth_failures == 0 for merchant in healthy)


def refusals(index: int, count: int) -> Refusal:
    """404 to the first quarter, 403, 500, then a 10 s stall to the last quarter."""
    kinds = (Refusal(status=404), Refusal(status=403), Refusal(status=500))
    quarter = index * 4 // count
    return kinds[quarter] if quarter < len(kinds) else Refusal(stall_seconds=10.0)


def test_fifty_tails_keep_their_interval_while_the_catalogue_fails_and_drift_checks_crawl(
    tmp_path,
):
    """50 merchants; the games endpoint refused (404, 403, 500) or stalled 10 s, a quarter
    each, and ``records`` answering 3 s late to every drift check (every 5 s: 50 checks
    keep the 8 threads of the checks' pool busy all the time).  Over 30 s, every tail polls
    within 10 % of once a second (it was 0 polls a second with the tails on that pool); a
    change reaches the warehouse within the usual freshness; no limit is exceeded; the
    refused catalogues show 0, one warning each."""
    count, window = 50, 30.0  # bench/isolation.py measures longer
    config = SimConfig(history_days=0.05, rounds_per_day=2000).with_merchants(count)
    for index, merchant in enumerate(profile.merchant_id for profile in config.profiles):
        config = config.refusing("games", refusals(index, count), merchant_id=merchant)
    with (
        running_simulator(config) as sim,
        fresh_database("postgres", tmp_path) as url,
    ):
        merchants = list(sim.merchant_ids)
        port = free_port()
        log = tmp_path / "daemon.log"
        conf = write_config(sim, url, tmp_path / "c.toml", port, "drift_check_interval = 5")
        warehouse = Warehouse(url)
        with daemon(conf, log) as process:
            wait_until(lambda: len(warehouse.sequences()) == count, CATCH_UP, process, log)
            for merchant in merchants:
                sim.set_faults(FaultRates(records_latency_ms=3000), merchant_id=merchant)
            time.sleep(5)
            before = polls(sim, merchants)
            drift_before = sum(sim.stats(merchant).count("records") for merchant in merchants)
            time.sleep(window)
            counted = per_merchant(before, polls(sim, merchants))
            drift_reads = (
                sum(sim.stats(merchant).count("records") for merchant in merchants) - drift_before
            )
            delays = change_delays(sim, warehouse, merchants)
            refused = {
                merchant for index, merchant in enumerate(merchants) if index * 4 // count < 2
            }
            erring = {
                merchant for index, merchant in enumerate(merchants) if index * 4 // count == 2
            }
            stalled = set(merchants) - refused - erring
            wait_until(
                lambda: gauge(port, "recordsync_catalogue_available").keys() >= refused | stalled,
                30,
                process,
                log,
            )
            available = gauge(port, "recordsync_catalogue_available")
        warehouse.engine.dispose()
        stats = sim.stats()
    assert min(counted.values()) >= 0.9 * window / POLL, sorted(counted.values())[:5]
    assert sum(counted.values()) >= 0.9 * count * window / POLL
    assert drift_reads > 0, "the drift checks ran, slowly, beside the tails"
    assert statistics.quantiles(delays, n=20)[-1] <= POLL + 1.0, sorted(delays)[-5:]
    assert stats.rate_limit_violations == 0
    assert stats.query_limit_violations == 0
    # 404 and 403: off at the first answer; stalled 10 s: served, late.  500: retried with a
    # backoff (its jobs wait for the pool the crawling drift checks keep busy), off after 5.
    assert {merchant for merchant, value in available.items() if value == 1} == stalled
    assert {merchant for merchant, value in available.items() if value == 0} >= refused
    assert {merchant for merchant, value in available.items() if value == 0} <= refused | erring
    warnings = [entry["merchant_id"] for entry in log_events(log, "catalogue_unavailable")]
    assert len(warnings) == len(set(warnings))  # one warning each
    assert refused <= set(warnings) <= refused | erring
    retried = {entry["merchant_id"] for entry in log_events(log, "catalogue_read_failed")}
    assert retried == erring
    served = {entry["merchant_id"] for entry in log_events(log, "catalogue_refreshed")}
    assert served == stalled


def change_delays(sim: Simulator, warehouse: Warehouse, merchants: list[str]) -> list[float]:
    """One change at every merchant at once; the seconds until each is in the warehouse."""
    started = time.monotonic()
    for merchant in merchants:
        sim.step(1, merchant_id=merchant)
    expected = {merchant: sim.watermark(merchant) for merchant in merchants}
    arrived: dict[str, float] = {}
    while len(arrived) < len(merchants) and time.monotonic() - started < 30:
        committed = warehouse.sequences()
        now = time.monotonic() - started
        for merchant, sequence in expected.items():
            if merchant not in arrived and committed.get(merchant) == sequence:
                arrived[merchant] = now
        time.sleep(0.05)
    assert len(arrived) == len(merchants), set(merchants) - set(arrived)
    return list(arrived.values())


def test_a_refused_catalogue_shows_in_status_and_as_a_metric_and_the_records_sync(tmp_path):
    """Two merchants; the platform does not serve the catalogue to one (404): its records
    sync all the same, ``status`` says since when and why, the metric reads 0, and one
    warning names the endpoint and the status."""
    config = SimConfig(history_days=0.5, rounds_per_day=400).with_merchants(2)
    refused, served = (profile.merchant_id for profile in config.profiles)
    config = config.refusing("games", Refusal(status=404), merchant_id=refused)
    with (
        running_simulator(config) as sim,
        fresh_database("sqlite", tmp_path) as url,
    ):
        port = free_port()
        log = tmp_path / "daemon.log"
        conf = write_config(sim, url, tmp_path / "c.toml", port)
        with daemon(conf, log) as process:
            wait_until(
                lambda: len(gauge(port, "recordsync_catalogue_available")) == 2, 60, process, log
            )
            available = gauge(port, "recordsync_catalogue_available")
            status = subprocess.run(  # noqa: S603 - our own interpreter and module
                [sys.executable, "-m", "recordsync", "--config", str(conf), "status", "--json"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            table = subprocess.run(  # noqa: S603
                [sys.executable, "-m", "recordsync", "--config", str(conf), "status"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
                env={"COLUMNS": "200", "PATH": ""},
            )
            from recordsync.warehouse import Warehouse as Store  # noqa: PLC0415

            store = Store.connect(url)
            try:
                wait_until(
                    lambda: (
                        not any(
                            differences(store, merchant, sim.truth(merchant))
                            for merchant in (refused, served)
                        )
                    ),
                    60,
                    process,
                    log,
                )
            finally:
                store.close()
    assert available == {refused: 0.0, served: 1.0}
    views = {view["merchant_id"]: view for view in json.loads(status.stdout)["merchants"]}
    (endpoint,) = views[refused]["endpoints"]
    assert (endpoint["endpoint"], endpoint["available"], endpoint["status"], endpoint["code"]) == (
        "games",
        False,
        404,
        "RESOURCE_NOT_FOUND",
    )
    assert endpoint["next_check_at"] > endpoint["checked_at"]
    assert [item["available"] for item in views[served]["endpoints"]] == [True]
    assert "NOT served since" in table.stdout
    assert "404 RESOURCE_NOT_FOUND" in table.stdout
    (warning,) = log_events(log, "catalogue_unavailable")
    assert (warning["merchant_id"], warning["endpoint"], warning["status"]) == (
        refused,
        "games",
        404,
    )
