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
  ``--replicas 2``: the same merchants over two daemons started together with the same
  configuration (but for the port of their /metrics), sharing them through the warehouse's
  leases as a fleet would, about half each: the aggregate, and each replica's share of it,
  its requests and its CPU.

``--tree PATH`` runs the daemons from another checkout (``PYTHONPATH=PATH``, so ``python -m
recordsync`` imports that tree) with the simulator and this script from this one, so that a
tree from before a change is measured by the same bench.

    .venv/bin/python bench/fleet.py [--size tiny|full] [--check] [--part all|idle|backfill]
        [--replicas N] [--tree PATH]
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import tempfile
import time
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
TARGET_BACKFILL_SHARE: Final = 0.85  # of the merchants' whole limit


# -- the daemon and its warehouse --------------------------------------------------------


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


def imported_from(tree: Path) -> str:
    """Where a daemon started with ``tree`` imports ``recordsync`` from, and the tree's commit:
    printed with the figures, so a run says which code it measured."""
    code = harness.tree_code(tree)
    return f"{code.package} ({code.commit or 'no git commit'})"


def daemon(
    config: Path, log: Path, *, tree: Path | None = None, port: int | None = None
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """``python -m recordsync --config FILE run`` (``harness.daemon``).

    ``tree``: the checkout to run it from; ``port``: its /metrics port instead of the file's,
    so replicas of one configuration can share a host (the environment wins over the file)."""
    env = harness.daemon_environment(tree)
    if port is not None:
        env["RECORDSYNC_HTTP_PORT"] = str(port)
    return harness.daemon(["--config", str(config), "run"], log, tree=tree, env=env)


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

    def snapshot_records_by_merchant(self) -> dict[str, int]:
        """``snapshot_records`` per merchant."""
        query = text(
            "SELECT merchant_id, coalesce(sum(records), 0) FROM snapshot_windows "
            "GROUP BY merchant_id"
        )
        return {merchant: int(records) for merchant, records in self.conn.execute(query)}

    def holders(self) -> dict[str, tuple[int, int]]:
        """merchant -> (process id of the live replica holding it, its epoch): the warehouse's
        leases (``merchant_leases``) and the replicas' rows, which carry their process id."""
        query = text(
            "SELECT l.merchant_id, r.pid, l.epoch FROM merchant_leases l "
            "JOIN replicas r ON r.replica_id = l.holder WHERE l.released_at IS NULL"
        )
        return {
            merchant: (int(pid), int(epoch)) for merchant, pid, epoch in self.conn.execute(query)
        }

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
        by_endpoint: collections.defaultdict[str, float] = collections.defaultdict(float)
        limited = 0.0
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                if sample.name == "recordsync_platform_requests_total":
                    by_endpoint[sample.labels["endpoint"]] += sample.value
                elif sample.name == "recordsync_platform_rate_limited_total":
                    limited += sample.value
        return cls(dict(by_endpoint), limited)

    @staticmethod
    def served(port: int) -> bool:
        """Whether the daemon's /metrics answers yet."""
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).is_success
        except httpx.TransportError:
            return False

    def per_second(self, earlier: Requests, endpoint: str, seconds: float) -> float:
        now, then = self.by_endpoint.get(endpoint, 0.0), earlier.by_endpoint.get(endpoint, 0.0)
        return (now - then) / seconds


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


def idle(
    merchants: int,
    size: Size,
    folder: Path,
    profile: Path | None = None,
    *,
    tree: Path | None = None,
) -> Idle:
    """``profile``: after the measurement (so py-spy does not weigh on it), sample the daemon
    for as long again; raw collapsed stacks go there.  ``tree``: the daemon's checkout."""
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
        port = harness.free_port()
        config = write_config(sim, url, folder, days, port)
        log = folder / f"idle-{merchants}.log"
        warehouse = Warehouse(url)
        try:
            with daemon(config, log, tree=tree) as process:
                catch_up = harness.wait_until(
                    lambda: warehouse.tailing() == merchants, (process, log)
                )
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
class Measured:
    """What a backfill measured, one daemon or several."""

    merchants: int
    records: int  # in the simulator, every merchant
    measured_records: int
    measured_seconds: float
    total_seconds: float  # from the daemons' start until every merchant tails

    @property
    def rate(self) -> float:
        return self.measured_records / self.measured_seconds


@dataclass(frozen=True, slots=True)
class Backfill(Measured):
    daemon_core: float
    simulator_core: float
    server_core: float
    snapshot_requests: float  # records requests per second, every merchant, while measured
    tail_requests: float  # record-changes requests per second, likewise
    rate_limited: float  # 429 answers over the whole run


def backfill_simulator(size: Size) -> contextlib.AbstractContextManager[harness.SimProcess]:
    """The simulator of a backfill: ``size``'s merchants and history, the default limit."""
    return harness.sim_process(
        history_days=size.backfill_days,
        rounds_per_day=size.backfill_rounds_per_day,
        record_requests=PLATFORM_LIMIT,
        merchants=size.backfill_merchants,
    )


def backfill_config(
    sim: harness.SimProcess,
    url: str,
    folder: Path,
    size: Size,
    port: int,
    *,
    concurrency: int | None,
) -> Path:
    """``write_config`` for a backfill, with its ``snapshot_concurrency`` when given."""
    extra = () if concurrency is None else (f"snapshot_concurrency = {concurrency}",)
    return write_config(sim, url, folder, size.backfill_days, port, *extra)


def backfill(
    size: Size, folder: Path, concurrency: int | None, *, tree: Path | None = None
) -> Backfill:
    """Measured from the first committed snapshot page until the first merchant finishes its
    snapshot: the span in which all of them backfill at once.  ``tree``: the daemon's
    checkout."""
    merchants = size.backfill_merchants
    with (
        backfill_simulator(size) as sim,
        harness.database("postgres") as url,
    ):
        port = harness.free_port()
        config = backfill_config(sim, url, folder, size, port, concurrency=concurrency)
        log = folder / "backfill.log"
        warehouse = Warehouse(url)
        try:
            with daemon(config, log, tree=tree) as process:
                started = time.monotonic()
                harness.wait_until(lambda: warehouse.snapshot_records() > 0, (process, log))
                first = warehouse.snapshot_records()
                requests = Requests.read(port)
                cpu = harness.process_cpu_seconds(process.pid)
                sim_cpu, server_cpu = sim.cpu_seconds(), harness.server_cpu_seconds("postgres")
                measure_started = time.monotonic()
                harness.wait_until(lambda: warehouse.tailing() > 0, (process, log))
                wall = time.monotonic() - measure_started
                last = warehouse.snapshot_records()
                later = Requests.read(port)
                cpu = harness.process_cpu_seconds(process.pid) - cpu
                sim_cpu = sim.cpu_seconds() - sim_cpu
                server_cpu = harness.server_cpu_seconds("postgres") - server_cpu
                harness.wait_until(lambda: warehouse.tailing() == merchants, (process, log))
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


@dataclass(frozen=True, slots=True)
class ReplicaShare:
    """One daemon's part of a shared backfill, over the measured seconds."""

    held_before: int  # merchants it held when the measurement started
    held: int  # merchants it held when the measurement ended
    measured_records: int  # committed for the merchants it held at the end
    core: float
    snapshot_requests: float  # records requests per second, its merchants together
    tail_requests: float  # record-changes requests per second, likewise
    rate_limited: float  # 429 answers over the whole run


@dataclass(frozen=True, slots=True)
class SharedBackfill(Measured):
    replicas: tuple[ReplicaShare, ...]
    moved: int  # merchants taken or handed over while measured
    simulator_core: float
    server_core: float


def shared_backfill(
    size: Size,
    folder: Path,
    concurrency: int | None,
    replicas: int,
    *,
    tree: Path | None = None,
) -> SharedBackfill:
    """``backfill`` with the merchants shared by ``replicas`` daemons, started together with
    one configuration file (each its own /metrics port), measured over the same span.

    A replica's share is what the merchants it held at the end of the span committed in it:
    a merchant that changed hands meanwhile (``moved``; a replica that started late joins
    after the other took everything) counts for its last holder."""
    merchants = size.backfill_merchants
    with (
        backfill_simulator(size) as sim,
        harness.database("postgres") as url,
        contextlib.ExitStack() as stack,
    ):
        ports = harness.free_ports(replicas)
        config = backfill_config(sim, url, folder, size, ports[0], concurrency=concurrency)
        logs = [folder / f"backfill-replica-{number}.log" for number in range(1, replicas + 1)]
        warehouse = Warehouse(url)
        stack.callback(warehouse.close)
        processes = [
            stack.enter_context(daemon(config, log, tree=tree, port=port))
            for log, port in zip(logs, ports, strict=True)
        ]
        watched = tuple(zip(processes, logs, strict=True))
        started = time.monotonic()
        # A replica slow to start may find the merchants taken, but its /metrics is read too.
        harness.wait_until(lambda: all(Requests.served(port) for port in ports), *watched)
        harness.wait_until(lambda: warehouse.snapshot_records() > 0, *watched)
        first = warehouse.snapshot_records_by_merchant()
        held_first = warehouse.holders()
        requests = [Requests.read(port) for port in ports]
        cpu = [harness.process_cpu_seconds(process.pid) for process in processes]
        sim_cpu, server_cpu = sim.cpu_seconds(), harness.server_cpu_seconds("postgres")
        measure_started = time.monotonic()
        harness.wait_until(lambda: warehouse.tailing() > 0, *watched)
        wall = time.monotonic() - measure_started
        last = warehouse.snapshot_records_by_merchant()
        held_last = warehouse.holders()
        later = [Requests.read(port) for port in ports]
        cpu = [
            harness.process_cpu_seconds(process.pid) - before
            for process, before in zip(processes, cpu, strict=True)
        ]
        sim_cpu = sim.cpu_seconds() - sim_cpu
        server_cpu = harness.server_cpu_seconds("postgres") - server_cpu
        harness.wait_until(lambda: warehouse.tailing() == merchants, *watched)
        total = time.monotonic() - started
        rate_limited = [Requests.read(port).rate_limited for port in ports]
        pids = [process.pid for process in processes]
    shares = []
    for index, pid in enumerate(pids):
        held = {merchant for merchant, (holder, _) in held_last.items() if holder == pid}
        shares.append(
            ReplicaShare(
                held_before=sum(1 for holder, _ in held_first.values() if holder == pid),
                held=len(held),
                measured_records=sum(last.get(m, 0) - first.get(m, 0) for m in held),
                core=cpu[index] / wall,
                snapshot_requests=later[index].per_second(requests[index], "records", wall),
                tail_requests=later[index].per_second(requests[index], "record-changes", wall),
                rate_limited=rate_limited[index],
            )
        )
    return SharedBackfill(
        merchants=merchants,
        records=sim.records,
        measured_records=sum(last.values()) - sum(first.values()),
        measured_seconds=wall,
        total_seconds=total,
        replicas=tuple(shares),
        moved=sum(1 for merchant, lease in held_last.items() if held_first.get(merchant) != lease),
        simulator_core=sim_cpu / wall,
        server_core=server_cpu / wall,
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


def backfill_target(merchants: int) -> float:
    """Records/s: a share of what the merchants' limits allow, at a page per request."""
    return TARGET_BACKFILL_SHARE * merchants * PLATFORM_LIMIT * PAGE


def report_aggregate(
    report: harness.Report,
    label: str,
    run: Measured,
    *,
    snapshot: float,
    tail: float,
    limited: float,
) -> None:
    """The aggregate against its target, and per merchant: records, records requests and
    change polls a second (``snapshot``, ``tail``: every merchant's); the 429 answers."""
    target = backfill_target(run.merchants)
    report.add(
        f"{label}, {run.merchants} merchants: aggregate",
        run.rate,
        "rec/s",
        target=f">= {target:,.0f}",
        met=run.rate >= target,
    )
    each = run.merchants
    report.add(f"{label}: per merchant", run.rate / each, "rec/s")
    report.add(f"{label}: records requests per merchant", snapshot / each, "req/s")
    report.add(f"{label}: change polls per merchant", tail / each, "req/s")
    report.add(f"{label}: 429 answers (whole run)", limited, "")


def report_cpu(
    report: harness.Report,
    label: str,
    together: str,
    daemons: float,
    run: Backfill | SharedBackfill,
) -> None:
    """The simulator's and the server's CPU, and with the daemons' (``daemons``) the share of
    the machine's cores (the figure named ``together``)."""
    report.add(f"{label}: simulator CPU", run.simulator_core * 100, "% core")
    report.add(f"{label}: PostgreSQL server CPU", run.server_core * 100, "% core")
    busy = daemons + run.simulator_core + run.server_core
    report.add(
        f"{label}: {together}, of the machine's cores", busy / (os.cpu_count() or 1) * 100, "%"
    )


def report_backfill(report: harness.Report, run: Backfill) -> None:
    report.note(
        f"backfill: {run.merchants} merchants, {run.records:,} records in all, limit "
        f"{PLATFORM_LIMIT} requests/s each; measured over {run.measured_seconds:.1f} s while "
        f"all of them snapshot ({run.total_seconds:.1f} s until every one tails)"
    )
    report_aggregate(
        report,
        "backfill",
        run,
        snapshot=run.snapshot_requests,
        tail=run.tail_requests,
        limited=run.rate_limited,
    )
    report.add("backfill: daemon CPU", run.daemon_core * 100, "% core")
    report_cpu(report, "backfill", "all three", run.daemon_core, run)


def report_shared_backfill(report: harness.Report, run: SharedBackfill) -> None:
    count = len(run.replicas)
    before = " + ".join(str(replica.held_before) for replica in run.replicas)
    after = " + ".join(str(replica.held) for replica in run.replicas)
    report.note(
        f"backfill over {count} replicas: {run.merchants} merchants, {run.records:,} records in "
        f"all, limit {PLATFORM_LIMIT} requests/s each; measured over "
        f"{run.measured_seconds:.1f} s while all of them snapshot ({run.total_seconds:.1f} s "
        f"until every one tails); merchants held at its start {before}, at its end {after}, "
        f"{run.moved} taken or moved meanwhile"
    )
    if run.measured_seconds < 1:
        report.note("measured over less than a second (a tiny history): the rates are noise")
    label = f"backfill, {count} replicas"
    snapshot = sum(replica.snapshot_requests for replica in run.replicas)
    tail = sum(replica.tail_requests for replica in run.replicas)
    limited = sum(replica.rate_limited for replica in run.replicas)
    report_aggregate(report, label, run, snapshot=snapshot, tail=tail, limited=limited)
    for number, replica in enumerate(run.replicas, 1):
        name = f"replica {number}"
        held = max(replica.held, 1)
        report.add(f"{name}: merchants held at the end", replica.held, "")
        report.add(f"{name}: aggregate", replica.measured_records / run.measured_seconds, "rec/s")
        report.add(
            f"{name}: records requests per merchant", replica.snapshot_requests / held, "req/s"
        )
        report.add(f"{name}: change polls per merchant", replica.tail_requests / held, "req/s")
        report.add(f"{name}: 429 answers (whole run)", replica.rate_limited, "")
        report.add(f"{name}: daemon CPU", replica.core * 100, "% core")
    daemons = sum(replica.core for replica in run.replicas)
    report.add(f"{label}: daemons' CPU together", daemons * 100, "% core")
    report_cpu(report, label, "all", daemons, run)


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
            (
                "--replicas",
                {
                    "type": int,
                    "default": 1,
                    "help": "backfill: daemons sharing the merchants through the warehouse "
                    "(default 1: one daemon holds them all)",
                },
            ),
            (
                "--tree",
                {
                    "type": Path,
                    "help": "run the daemons from this checkout (PYTHONPATH=TREE), the "
                    "simulator from this one: a tree from before a change, same bench",
                },
            ),
        ],
    )
    if args.replicas < 1:
        print("fleet.py: --replicas must be 1 or more", file=sys.stderr)
        return 2
    tree = None if args.tree is None else args.tree.resolve()
    if tree is not None and not (tree / "recordsync" / "__main__.py").is_file():
        print(f"fleet.py: --tree {tree} holds no recordsync package", file=sys.stderr)
        return 2
    size = SIZES[args.size]
    report = harness.Report("a fleet of merchants in one daemon, PostgreSQL", args.size)
    report.header()
    report.note(
        "one `recordsync run` process, default poll interval (1 s), page size and limit; "
        "simulator in its own process"
    )
    if args.replicas > 1 and args.part in {"all", "backfill"}:
        report.note(
            f"backfill: {args.replicas} `recordsync run` processes started together, one "
            "configuration, sharing the merchants through the warehouse's leases"
        )
    if tree is not None:
        report.note(f"daemons from {imported_from(tree)}; simulator from {harness.ROOT}")
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        counts = (args.merchants,) if args.merchants else size.idle_merchants
        if args.part in {"all", "idle"}:
            runs = [
                idle(
                    count,
                    size,
                    folder,
                    args.profile if count == max(counts) else None,
                    tree=tree,
                )
                for count in counts
            ]
            report_idle(report, runs)
            if args.profile is not None:
                print("  where the idle daemon's CPU goes (py-spy --gil, share of the samples):")
                for layer, share in profiling.summarise(args.profile):
                    print(f"    {share * 100:5.1f}%  {layer}")
                print(f"  raw samples: {args.profile}")
        if args.part in {"all", "backfill"}:
            concurrency = args.snapshot_concurrency
            if args.replicas == 1:
                report_backfill(report, backfill(size, folder, concurrency, tree=tree))
            else:
                run = shared_backfill(size, folder, concurrency, args.replicas, tree=tree)
                report_shared_backfill(report, run)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    report.note(f"load average at the end: {load}")
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
