"""Benchmark 6, the fleet: one ``recordsync run`` process syncing many merchants.

The simulator serves N merchants (``recordsync sim --merchants N``, its own process, each
merchant with its own secret, history and the default limit of 2 requests per second), and one
daemon (``python -m recordsync --config FILE run``, a real child process with every merchant in
its ``[[merchants]]``) syncs them all into a new PostgreSQL database, dropped afterwards.

- idle: 10 and then 50 merchants with a small history; once every merchant tails (phase
  ``tailing``) and a few polls more have passed, the daemon's CPU (user + system seconds from
  ``/proc`` over the measured wall seconds), its RSS, its threads and its connections to the
  warehouse (``pg_stat_activity``), tailing idle at the default poll interval of 1 s.  10 vs 50
  shows that threads and connections do not grow with the merchants;
- backfill: 10 merchants with a larger history at the default limit, the daemon snapshotting
  them all at once: aggregate records/s while every merchant is still snapshotting (the sum of
  the snapshot windows' committed records, a cheap read), and the CPU of the daemon, the
  simulator and the database server over the same seconds, which shows what limits it.

    .venv/bin/python bench/fleet.py [--size tiny|full] [--check]
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import harness
import httpx
import profiling
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, pool, text

from recordsync.core.state import Phase


@dataclass(frozen=True, slots=True)
class Size:
    idle_merchants: tuple[int, ...]
    idle_seconds: float  # measured, after the settle
    settle_seconds: float  # tailing idle before the measurement starts
    backfill_merchants: int
    backfill_days: float  # history per merchant
    backfill_rounds_per_day: int


SIZES: Final = {
    "tiny": Size((3, 10), 5.0, 2.0, 3, 0.5, 2_000),
    "full": Size((10, 50), 30.0, 10.0, 10, 2.0, 50_000),
}
IDLE_HISTORY: Final = (0.05, 2_000)  # history_days, rounds_per_day: ~100 records a merchant
TARGET_IDLE_CORE: Final = 0.15
TARGET_IDLE_RSS_MB: Final = 300.0
PLATFORM_LIMIT: Final = 2  # requests per second per merchant: the default limit
PAGE: Final = 1000
TARGET_BACKFILL_SHARE: Final = 0.9
CATCH_UP_TIMEOUT: Final = 900.0


# -- the daemon and its warehouse --------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_config(
    sim: harness.SimProcess,
    url: str,
    folder: Path,
    history_days: float,
    port: int,
    *extra: str,
) -> Path:
    """The daemon's TOML: every merchant the simulator serves, everything else the default
    (but for the port of its /metrics, which the bench reads)."""
    history_from = datetime.now(UTC) - timedelta(days=history_days + 1)
    lines = [
        f'base_url = "{sim.base_url}"',
        f'database_url = "{url}"',
        f'history_from = "{history_from.isoformat()}"',
        f"http_port = {port}",
        'log_level = "warning"',
        'log_format = "json"',
        *extra,
    ]
    for merchant_id, secret in sim.merchants:
        lines += ["[[merchants]]", f'merchant_id = "{merchant_id}"', f'secret = "{secret}"']
    path = folder / "fleet.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@contextlib.contextmanager
def daemon(config: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m recordsync --config FILE run``; stopped with SIGTERM (a graceful stop)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RECORDSYNC_")}
    with log.open("ab") as sink:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "recordsync", "--config", str(config), "run"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=harness.ROOT,
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Warehouse:
    """The bench's own reads of the daemon's warehouse: one connection, cheap queries."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")
        self.conn = self.engine.connect()

    def close(self) -> None:
        self.conn.close()
        self.engine.dispose()

    def tailing(self) -> int:
        """Merchants whose rebuild is done; 0 before the daemon created its tables."""
        try:
            query = text("SELECT count(*) FROM sync_state WHERE phase = :phase")
            return int(self.conn.execute(query, {"phase": Phase.TAILING.value}).scalar_one())
        except Exception:  # noqa: BLE001 - the schema is not there yet
            self.conn.rollback()
            return 0

    def snapshot_records(self) -> int:
        """Records committed by every snapshot window so far (a few rows per merchant)."""
        try:
            query = text("SELECT coalesce(sum(records), 0) FROM snapshot_windows")
            return int(self.conn.execute(query).scalar_one())
        except Exception:  # noqa: BLE001 - the schema is not there yet
            self.conn.rollback()
            return 0

    def daemon_connections(self) -> int:
        """Sessions on this database other than the bench's own."""
        query = text(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(self.conn.execute(query).scalar_one())


@dataclass(frozen=True, slots=True)
class Requests:
    """The daemon's platform requests so far (its /metrics), summed over its merchants."""

    by_endpoint: dict[str, float]
    rate_limited: float

    @classmethod
    def read(cls, port: int) -> Requests:
        body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        by_endpoint: collections.Counter[str] = collections.Counter()
        limited = 0.0
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                if sample.name == "recordsync_platform_requests_total":
                    by_endpoint[sample.labels["endpoint"]] += sample.value
                elif sample.name == "recordsync_platform_rate_limited_total":
                    limited += sample.value
        return cls(dict(by_endpoint), limited)

    def per_second(self, earlier: Requests, endpoint: str, seconds: float) -> float:
        now, then = self.by_endpoint.get(endpoint, 0.0), earlier.by_endpoint.get(endpoint, 0.0)
        return (now - then) / seconds


def wait_until(condition: object, process: subprocess.Popen[bytes], log: Path) -> float:
    """Poll ``condition`` until true; its wall seconds.  A daemon that exits is an error."""
    started = time.monotonic()
    while not condition():  # type: ignore[operator]
        if process.poll() is not None:
            raise RuntimeError(f"the daemon exited {process.returncode}:\n{_tail(log)}")
        if time.monotonic() - started > CATCH_UP_TIMEOUT:
            raise RuntimeError(f"the daemon did not catch up:\n{_tail(log)}")
        time.sleep(0.5)
    return time.monotonic() - started


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


# -- idle ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Idle:
    merchants: int
    catch_up_seconds: float
    polls: float  # record-changes requests per second, every merchant
    core: float  # CPU seconds per wall second
    simulator_core: float
    rss_mb: float
    peak_rss_mb: float
    threads: int
    connections: int


def idle(merchants: int, size: Size, folder: Path, profile: Path | None = None) -> Idle:
    """``profile``: after the measurement (so py-spy does not weigh on it), sample the daemon
    for as long again; raw collapsed stacks go there."""
    days, rounds = IDLE_HISTORY
    with (
        harness.sim_process(
            history_days=days,
            rounds_per_day=rounds,
            record_requests=PLATFORM_LIMIT,
            merchants=merchants,
        ) as sim,
        harness.database("postgres") as url,
    ):
        port = free_port()
        config = write_config(sim, url, folder, days, port)
        log = folder / f"idle-{merchants}.log"
        warehouse = Warehouse(url)
        try:
            with daemon(config, log) as process:
                catch_up = wait_until(lambda: warehouse.tailing() == merchants, process, log)
                time.sleep(size.settle_seconds)
                ours, theirs = process.pid, sim.pid
                requests = Requests.read(port)
                cpu, sim_cpu = harness.process_cpu_seconds(ours), sim.cpu_seconds()
                started = time.monotonic()
                time.sleep(size.idle_seconds)
                wall = time.monotonic() - started
                cpu = harness.process_cpu_seconds(ours) - cpu
                sim_cpu = harness.process_cpu_seconds(theirs) - sim_cpu
                polls = Requests.read(port).per_second(requests, "record-changes", wall)
                result = Idle(
                    merchants=merchants,
                    catch_up_seconds=catch_up,
                    polls=polls,
                    core=cpu / wall,
                    simulator_core=sim_cpu / wall,
                    rss_mb=harness.resident_mb(ours),
                    peak_rss_mb=harness.resident_mb(ours, peak=True),
                    threads=harness.thread_count(ours),
                    connections=warehouse.daemon_connections(),
                )
                if profile is not None:
                    with profiling.py_spy(profile, rate=100, pid=ours, gil=True):
                        time.sleep(size.idle_seconds)
        finally:
            warehouse.close()
    return result


# -- backfill ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Backfill:
    merchants: int
    records: int  # in the simulator, every merchant
    measured_records: int
    measured_seconds: float
    total_seconds: float  # from the daemon's start until every merchant tails
    daemon_core: float
    simulator_core: float
    server_core: float
    snapshot_requests: float  # records requests per second, every merchant, while measured
    tail_requests: float  # record-changes requests per second, likewise
    rate_limited: float  # 429 answers over the whole run

    @property
    def rate(self) -> float:
        return self.measured_records / self.measured_seconds


def backfill(size: Size, folder: Path, concurrency: int | None) -> Backfill:
    """Measured from the first committed snapshot page until the first merchant finishes its
    snapshot: the span in which all of them backfill at once."""
    merchants = size.backfill_merchants
    with (
        harness.sim_process(
            history_days=size.backfill_days,
            rounds_per_day=size.backfill_rounds_per_day,
            record_requests=PLATFORM_LIMIT,
            merchants=merchants,
        ) as sim,
        harness.database("postgres") as url,
    ):
        port = free_port()
        extra = () if concurrency is None else (f"snapshot_concurrency = {concurrency}",)
        config = write_config(sim, url, folder, size.backfill_days, port, *extra)
        log = folder / "backfill.log"
        warehouse = Warehouse(url)
        try:
            with daemon(config, log) as process:
                started = time.monotonic()
                wait_until(lambda: warehouse.snapshot_records() > 0, process, log)
                first = warehouse.snapshot_records()
                requests = Requests.read(port)
                cpu = harness.process_cpu_seconds(process.pid)
                sim_cpu, server_cpu = sim.cpu_seconds(), harness.server_cpu_seconds("postgres")
                measure_started = time.monotonic()
                wait_until(lambda: warehouse.tailing() > 0, process, log)
                wall = time.monotonic() - measure_started
                last = warehouse.snapshot_records()
                later = Requests.read(port)
                cpu = harness.process_cpu_seconds(process.pid) - cpu
                sim_cpu = sim.cpu_seconds() - sim_cpu
                server_cpu = harness.server_cpu_seconds("postgres") - server_cpu
                wait_until(lambda: warehouse.tailing() == merchants, process, log)
                total = time.monotonic() - started
                rate_limited = Requests.read(port).rate_limited
        finally:
            warehouse.close()
    return Backfill(
        merchants=merchants,
        records=sim.records,
        measured_records=last - first,
        measured_seconds=wall,
        total_seconds=total,
        daemon_core=cpu / wall,
        simulator_core=sim_cpu / wall,
        server_core=server_cpu / wall,
        snapshot_requests=later.per_second(requests, "records", wall),
        tail_requests=later.per_second(requests, "record-changes", wall),
        rate_limited=rate_limited,
    )


# -- the report ----------------------------------------------------------------------------


def report_idle(report: harness.Report, runs: list[Idle]) -> None:
    largest = max(run.merchants for run in runs)
    for run in runs:
        judged = run.merchants == largest
        report.add(f"idle, {run.merchants} merchants: catch-up", run.catch_up_seconds, "s")
        report.add(f"idle, {run.merchants} merchants: change polls", run.polls, "req/s")
        report.add(
            f"idle, {run.merchants} merchants: daemon CPU",
            run.core * 100,
            "% core",
            target=f"<= {TARGET_IDLE_CORE * 100:.0f}" if judged else "",
            met=run.core <= TARGET_IDLE_CORE if judged else None,
        )
        report.add(
            f"idle, {run.merchants} merchants: daemon RSS",
            run.rss_mb,
            "MB",
            target=f"<= {TARGET_IDLE_RSS_MB:.0f}" if judged else "",
            met=run.rss_mb <= TARGET_IDLE_RSS_MB if judged else None,
        )
        report.add(f"idle, {run.merchants} merchants: daemon peak RSS", run.peak_rss_mb, "MB")
        report.add(f"idle, {run.merchants} merchants: daemon threads", run.threads, "")
        report.add(f"idle, {run.merchants} merchants: warehouse connections", run.connections, "")
        report.add(
            f"idle, {run.merchants} merchants: simulator CPU", run.simulator_core * 100, "% core"
        )
    smallest = min(runs, key=lambda run: run.merchants)
    biggest = max(runs, key=lambda run: run.merchants)
    if biggest is smallest:
        return
    between = f"{smallest.merchants} -> {biggest.merchants} merchants"
    more = biggest.merchants - smallest.merchants
    # The one pool opens connections as it needs them (at most its size), never per merchant.
    # One parked thread per merchant remains (its engine waiting for its generation's end);
    # the pools, the scheduler and the watchers are shared.
    for name, added in (
        ("warehouse connections", biggest.connections - smallest.connections),
        ("threads", biggest.threads - smallest.threads),
    ):
        report.add(f"{name} added per merchant, {between}", added / more, "")


def report_backfill(report: harness.Report, run: Backfill) -> None:
    target = TARGET_BACKFILL_SHARE * run.merchants * PLATFORM_LIMIT * PAGE
    report.note(
        f"backfill: {run.merchants} merchants, {run.records:,} records in all, limit "
        f"{PLATFORM_LIMIT} requests/s each; measured over {run.measured_seconds:.1f} s while "
        f"all of them snapshot ({run.total_seconds:.1f} s until every one tails)"
    )
    report.add(
        f"backfill, {run.merchants} merchants: aggregate",
        run.rate,
        "rec/s",
        target=f">= {target:,.0f}",
        met=run.rate >= target,
    )
    report.add("backfill: per merchant", run.rate / run.merchants, "rec/s")
    each = run.merchants
    report.add("backfill: records requests per merchant", run.snapshot_requests / each, "req/s")
    report.add("backfill: change polls per merchant", run.tail_requests / each, "req/s")
    report.add("backfill: 429 answers (whole run)", run.rate_limited, "")
    report.add("backfill: daemon CPU", run.daemon_core * 100, "% core")
    report.add("backfill: simulator CPU", run.simulator_core * 100, "% core")
    report.add("backfill: PostgreSQL server CPU", run.server_core * 100, "% core")
    busy = run.daemon_core + run.simulator_core + run.server_core
    report.add(
        "backfill: all three, of the machine's cores", busy / (os.cpu_count() or 1) * 100, "%"
    )


def main() -> int:
    args = harness.arguments(
        __doc__.splitlines()[0],
        [
            (
                "--profile",
                {
                    "type": Path,
                    "help": "py-spy the idle daemon with the most merchants: raw stacks",
                },
            ),
            ("--part", {"choices": ("all", "idle", "backfill"), "default": "all"}),
            ("--merchants", {"type": int, "help": "idle: only this many merchants"}),
            (
                "--snapshot-concurrency",
                {"type": int, "help": "backfill: the daemon's snapshot_concurrency (default 4)"},
            ),
        ],
    )
    size = SIZES[args.size]
    report = harness.Report("a fleet of merchants in one daemon, PostgreSQL", args.size)
    report.header()
    report.note(
        "one `recordsync run` process, default poll interval (1 s), page size and limit; "
        "simulator in its own process"
    )
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        counts = (args.merchants,) if args.merchants else size.idle_merchants
        if args.part in {"all", "idle"}:
            runs = [
                idle(count, size, folder, args.profile if count == max(counts) else None)
                for count in counts
            ]
            report_idle(report, runs)
            if args.profile is not None:
                print("  where the idle daemon's CPU goes (py-spy --gil, share of the samples):")
                for layer, share in profiling.summarise(args.profile):
                    print(f"    {share * 100:5.1f}%  {layer}")
                print(f"  raw samples: {args.profile}")
        if args.part in {"all", "backfill"}:
            report_backfill(report, backfill(size, folder, args.snapshot_concurrency))
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    report.note(f"load average at the end: {load}")
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
