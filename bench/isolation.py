"""Benchmark 8, isolation: one merchant's or one feature's failure never slows
another's tail.

One ``recordsync run`` process (a real child, every merchant in its ``[[merchants]]``) against
the simulator in its own process, into a new PostgreSQL database, dropped afterwards:

- catalogue: N merchants whose platform refuses ``GET /v1/games`` (404 to a quarter, 403 to
  a quarter, 500 to a quarter, a 10 s stall to the rest) while ``records`` answers 3 s late,
  so that every drift check (every 10 s) is slow.  Measured over a window once every
  merchant tails: the change polls a second against N / poll interval, the slowest
  merchant's, and how old each merchant's newest row is (live traffic of 5 changes a second
  each), its 95th percentile against the poll interval + 1 s;
- refused: M merchants tailing, then the platform refuses the secret of half of them (a
  rotation at the platform the files have not caught up with: 401 to every request): the
  healthy half's change polls against M / 2 / interval, and the requests the refused half
  sends meanwhile (a slow retry each).  The simulator runs in this process here, which is
  how the bench rotates the secrets;
- idle: K merchants tailing idle at a 5 s poll: the daemon's CPU, RSS and threads;
- events: 250 connections to the notification port each sending a 1 MiB body
  naming no merchant: the daemon's peak RSS against its RSS before, a signed notification's
  answer meanwhile, and the refusal lines the log holds;
- probes: 8 clients that ask for ``/metrics`` and never read it while
  ``/healthz`` is asked every 0.5 s: the slowest answer, against the liveness probe's 5 s;
- takeover: a replica holding 10 merchants takes one more while the
  warehouse pool's only connection is held elsewhere for S seconds, so its takeover is stuck
  in its write; meanwhile each held merchant's ``confirmed()`` (asked before every request)
  is timed every 0.2 s: p50, p99, max and how many answered False (before the fix: 11.7 s
  and False, every merchant's lock lost);
- schemalock, MariaDB: a migration whose revision runs past the DDL
  sessions' idle limit (``wait_timeout``: 300 s, 330 s held; tiny: 2 s injected, 6 s held)
  while another session asks ``GET_LOCK(..., 0)`` every 0.5 s: how often it got the lock
  (before the fix: from 300 s on) and whether the upgrade ended.  Skipped, with a note, when
  no MariaDB answers;
- periodic: nine merchants backfilling in one process (``MerchantSyncs``,
  the daemon's assembly, over an in-process simulator whose budget the backfills keep full)
  whose checks share 8 periodic threads: over a window, the longest gap of each merchant's
  drift check, catalogue refresh and cross-check against twice its interval, the drift
  check's age as scraped (``recordsync_drift_check_age_seconds``) and its deferrals (before
  the fix: 11-18 s gaps at a 3 s interval, the drift checks queued on every thread).

``--tree DIR`` runs the events and probes parts' daemon from another checkout (the code
before, for "before" figures).

    .venv/bin/python bench/isolation.py [--size tiny|full] [--check] [--part ...] [--tree DIR]
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import json
import select
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import harness
import httpx
from fleet import Warehouse, daemon
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import make_url, text
from sqlalchemy.pool import NullPool

from recordsync.core.secret import Secret, SecretSource
from recordsync.core.settings import MerchantSettings, Settings
from recordsync.core.state import Phase, Window, backfill_job
from recordsync.core.stopping import Stopper
from recordsync.core.times import floor_ms
from recordsync.metrics import MERCHANT_LABEL, MetricName, Metrics
from recordsync.platform.signing import format_timestamp, sign
from recordsync.service.daemon.merchant_syncs import MerchantSyncs
from recordsync.service.secrets import SecretKeeper
from recordsync.sim import SimConfig, Simulator, running_simulator
from recordsync.sync.events import SyncObserver
from recordsync.sync.jobs import JobHost
from recordsync.warehouse import RequestKind, RequestState
from recordsync.warehouse import Warehouse as Store
from recordsync.warehouse.connection import create_warehouse_engine
from recordsync.warehouse.migrate import current_revision, head_revision, script_location, upgrade
from recordsync.warehouse.timeouts import DDL


@dataclass(frozen=True, slots=True)
class Size:
    catalogue_merchants: int
    refused_merchants: int
    idle_merchants: int
    window_seconds: float  # measured, after the settle
    settle_seconds: float
    event_merchants: int
    probe_merchants: int  # /metrics grows with them: 400 make 5 MB, more than a socket buffers
    stuck_seconds: float = 15.0  # how long the takeover's write is held up
    ddl_idle_seconds: int = DDL.idle_session  # the DDL sessions' idle limit (MariaDB)
    migration_seconds: float = 330.0  # how long the test-only revision runs
    drift_seconds: float = 3.0  # the periodic part's drift check interval
    periodic_window: float = 30.0  # the periodic part's window, measured while all backfill


SIZES: Final = {
    "tiny": Size(
        8,
        4,
        10,
        5.0,
        2.0,
        4,
        4,
        stuck_seconds=2.0,
        ddl_idle_seconds=2,
        migration_seconds=6.0,
        drift_seconds=1.5,
        periodic_window=4.0,
    ),
    "full": Size(50, 20, 200, 60.0, 10.0, 50, 400, stuck_seconds=15.0),
}
HISTORY: Final = (0.05, 2_000)  # history_days, rounds_per_day: ~100 records a merchant
LIVE_RATE: Final = 5.0  # changes a second per merchant while measured
POLL: Final = 1.0
IDLE_POLL: Final = 5.0
RECORDS_LATENCY_MS: Final = 3_000
DRIFT_INTERVAL: Final = 10
REFUSALS: Final = ("404", "403", "500", "stall:10")
WRONG_SECRET: Final = "w" * 43
POLL_SHARE: Final = 0.9  # within 10 % of N / interval


def write_config(
    base_url: str,
    merchants: Sequence[tuple[str, str]],
    url: str,
    folder: Path,
    port: int,
    *extra: str,
) -> Path:
    """The daemon's TOML: every merchant (id, secret) the simulator serves, the history of
    the simulator's."""
    days, _ = HISTORY
    history_from = datetime.now(UTC) - timedelta(days=days + 1)
    lines = [
        f'base_url = "{base_url}"',
        f'database_url = "{url}"',
        f'history_from = "{history_from.isoformat()}"',
        f"http_port = {port}",
        'log_level = "warning"',
        'log_format = "json"',
        *extra,
    ]
    for merchant_id, secret in merchants:
        lines += ["[[merchants]]", f'merchant_id = "{merchant_id}"', f'secret = "{secret}"']
    path = folder / "isolation.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def requests_by_merchant(port: int, endpoint: str) -> dict[str, float]:
    """Platform requests to ``endpoint`` so far, per merchant (the daemon's /metrics)."""
    body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    counts: collections.Counter[str] = collections.Counter()
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if (
                sample.name == "recordsync_platform_requests_total"
                and sample.labels["endpoint"] == endpoint
            ):
                counts[sample.labels["merchant_id"]] += sample.value
    return dict(counts)


def rate_limited(port: int) -> float:
    body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == "recordsync_platform_rate_limited_total"
    )


def newest_row_ages(warehouse: Warehouse) -> list[float]:
    """Seconds since each merchant's newest change (its records' latest updated_at)."""
    rows = warehouse.conn.execute(
        text("SELECT merchant_id, max(updated_at) FROM records GROUP BY merchant_id")
    ).all()
    now = datetime.now(UTC)
    return [(now - newest.replace(tzinfo=UTC)).total_seconds() for _, newest in rows if newest]


def per_second(
    before: dict[str, float], after: dict[str, float], seconds: float
) -> dict[str, float]:
    return {key: (after.get(key, 0.0) - before.get(key, 0.0)) / seconds for key in after}


# -- a failing catalogue and slow drift checks ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Catalogue:
    merchants: int
    polls: float  # record-changes requests a second, every merchant
    slowest: float  # the merchant with the fewest polls a second
    age_p95: float  # seconds, newest row of a merchant, over the samples
    age_max: float
    drift_requests: float  # records requests a second while measured (the slow drift checks)
    games_requests: float
    rate_limited: float


def catalogue(size: Size, folder: Path) -> Catalogue:
    merchants = size.catalogue_merchants
    days, rounds = HISTORY
    refusals = [
        (
            "--refuse",
            f"games={REFUSALS[index * len(REFUSALS) // merchants]}@demo-merchant-{index + 1}",
        )
        for index in range(merchants)
    ]
    with (
        harness.sim_process(
            history_days=days,
            rounds_per_day=rounds,
            record_requests=2,
            live_rate=LIVE_RATE,
            merchants=merchants,
            extra=[
                *(part for pair in refusals for part in pair),
                "--records-latency-ms",
                str(RECORDS_LATENCY_MS),
            ],
        ) as sim,
        harness.database("postgres") as url,
    ):
        port = harness.free_port()
        config = write_config(
            sim.base_url,
            sim.merchants,
            url,
            folder,
            port,
            f"drift_check_interval = {DRIFT_INTERVAL}",
        )
        log = folder / "catalogue.log"
        warehouse = Warehouse(url)
        try:
            with daemon(config, log) as process:
                harness.wait_until(lambda: warehouse.tailing() == merchants, (process, log))
                time.sleep(size.settle_seconds)
                polls, drift = (
                    requests_by_merchant(port, "record-changes"),
                    requests_by_merchant(port, "records"),
                )
                games = requests_by_merchant(port, "games")
                started = time.monotonic()
                ages: list[float] = []
                while time.monotonic() - started < size.window_seconds:
                    ages += newest_row_ages(warehouse)
                    time.sleep(1.0)
                wall = time.monotonic() - started
                rates = per_second(polls, requests_by_merchant(port, "record-changes"), wall)
                drift_rate = per_second(drift, requests_by_merchant(port, "records"), wall)
                games_rate = per_second(games, requests_by_merchant(port, "games"), wall)
                limited = rate_limited(port)
        finally:
            warehouse.close()
    ages.sort()
    return Catalogue(
        merchants=merchants,
        polls=sum(rates.values()),
        slowest=min(rates.values(), default=0.0),
        age_p95=ages[int(0.95 * (len(ages) - 1))] if ages else float("nan"),
        age_max=ages[-1] if ages else float("nan"),
        drift_requests=sum(drift_rate.values()),
        games_requests=sum(games_rate.values()),
        rate_limited=limited,
    )


def report_catalogue(report: harness.Report, run: Catalogue) -> None:
    expected = run.merchants / POLL
    report.note(
        f"catalogue: {run.merchants} merchants, games refused ({', '.join(REFUSALS)}, a "
        f"quarter each), records {RECORDS_LATENCY_MS} ms late, drift check every "
        f"{DRIFT_INTERVAL} s, live {LIVE_RATE:g} changes/s each, poll every {POLL:g} s"
    )
    report.add(
        "catalogue: change polls, every merchant",
        run.polls,
        "req/s",
        target=f">= {POLL_SHARE * expected:.1f} ({run.merchants} / {POLL:g} s, -10 %)",
        met=run.polls >= POLL_SHARE * expected,
    )
    report.add(
        "catalogue: change polls, the slowest merchant",
        run.slowest,
        "req/s",
        target=f">= {POLL_SHARE / POLL:.2f}",
        met=run.slowest >= POLL_SHARE / POLL,
    )
    report.add(
        "catalogue: newest row's age, p95",
        run.age_p95,
        "s",
        target=f"<= {POLL + 1:g} + 1/{LIVE_RATE:g}",
        met=run.age_p95 <= POLL + 1 + 1 / LIVE_RATE,
    )
    report.add("catalogue: newest row's age, max", run.age_max, "s")
    report.add("catalogue: drift check records requests", run.drift_requests, "req/s")
    report.add("catalogue: games requests", run.games_requests, "req/s")
    report.add(
        "catalogue: 429 answers (whole run)",
        run.rate_limited,
        "",
        target="0",
        met=run.rate_limited == 0,
    )


# -- merchants whose secret the platform refuses ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Refused:
    merchants: int
    healthy_polls: float
    healthy_slowest: float
    refused_requests: float  # every request of the refused half, a second


def refused(size: Size, folder: Path) -> Refused:
    merchants = size.refused_merchants
    days, rounds = HISTORY
    sim_config = SimConfig(history_days=days, rounds_per_day=rounds, live_rate=1.0)
    with (
        running_simulator(sim_config.with_merchants(merchants), live=True) as sim,
        harness.database("postgres") as url,
    ):
        served = [(profile.merchant_id, profile.secret) for profile in sim.config.profiles]
        bad = {merchant_id for merchant_id, _ in served[: merchants // 2]}
        port = harness.free_port()
        config = write_config(sim.base_url, served, url, folder, port, "catalogue_interval = 0")
        log = folder / "refused.log"
        warehouse = Warehouse(url)
        try:
            with daemon(config, log) as process:
                harness.wait_until(lambda: warehouse.tailing() == merchants, (process, log))
                for merchant_id in bad:  # rotated at the platform, not in the daemon's files
                    sim.rotate_secret(merchant_id, WRONG_SECRET)
                    sim.retire_secret(merchant_id)
                time.sleep(size.settle_seconds)
                before = {
                    endpoint: requests_by_merchant(port, endpoint)
                    for endpoint in ("record-changes", "capabilities", "records")
                }
                started = time.monotonic()
                time.sleep(size.window_seconds)
                wall = time.monotonic() - started
                after = {endpoint: requests_by_merchant(port, endpoint) for endpoint in before}
        finally:
            warehouse.close()
    polls = per_second(before["record-changes"], after["record-changes"], wall)
    healthy = [rate for merchant, rate in polls.items() if merchant not in bad]
    refused_total = sum(
        rate
        for endpoint in before
        for merchant, rate in per_second(before[endpoint], after[endpoint], wall).items()
        if merchant in bad
    )
    return Refused(merchants, sum(healthy), min(healthy, default=0.0), refused_total)


def report_refused(report: harness.Report, run: Refused) -> None:
    healthy = run.merchants - run.merchants // 2
    expected = healthy / POLL
    report.note(
        f"refused: {run.merchants} merchants tailing, then the platform refuses the secret of "
        f"{run.merchants // 2} (401 to every request), catalogue off"
    )
    report.add(
        f"refused: change polls, the {healthy} healthy merchants",
        run.healthy_polls,
        "req/s",
        target=f">= {POLL_SHARE * expected:.1f}",
        met=run.healthy_polls >= POLL_SHARE * expected,
    )
    report.add(
        "refused: change polls, the slowest healthy merchant",
        run.healthy_slowest,
        "req/s",
        target=f">= {POLL_SHARE / POLL:.2f}",
        met=run.healthy_slowest >= POLL_SHARE / POLL,
    )
    report.add(
        f"refused: requests of the {run.merchants // 2} refused merchants",
        run.refused_requests,
        "req/s",
    )


# -- many merchants idle ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Idle:
    merchants: int
    polls: float
    core: float
    rss_mb: float
    threads: int


def idle(size: Size, folder: Path) -> Idle:
    merchants = size.idle_merchants
    days, rounds = HISTORY
    with (
        harness.sim_process(
            history_days=days, rounds_per_day=rounds, record_requests=2, merchants=merchants
        ) as sim,
        harness.database("postgres") as url,
    ):
        port = harness.free_port()
        config = write_config(
            sim.base_url, sim.merchants, url, folder, port, f"poll_interval = {IDLE_POLL}"
        )
        log = folder / "idle.log"
        warehouse = Warehouse(url)
        try:
            with daemon(config, log) as process:
                harness.wait_until(lambda: warehouse.tailing() == merchants, (process, log))
                time.sleep(size.settle_seconds)
                polls = requests_by_merchant(port, "record-changes")
                cpu = harness.process_cpu_seconds(process.pid)
                started = time.monotonic()
                time.sleep(size.window_seconds)
                wall = time.monotonic() - started
                cpu = harness.process_cpu_seconds(process.pid) - cpu
                rates = per_second(polls, requests_by_merchant(port, "record-changes"), wall)
                result = Idle(
                    merchants=merchants,
                    polls=sum(rates.values()),
                    core=cpu / wall,
                    rss_mb=harness.resident_mb(process.pid),
                    threads=harness.thread_count(process.pid),
                )
        finally:
            warehouse.close()
    return result


def report_idle(report: harness.Report, run: Idle) -> None:
    expected = run.merchants / IDLE_POLL
    report.add(
        f"idle, {run.merchants} merchants at {IDLE_POLL:g} s: change polls",
        run.polls,
        "req/s",
        target=f">= {POLL_SHARE * expected:.1f}",
        met=run.polls >= POLL_SHARE * expected,
    )
    report.add(f"idle, {run.merchants} merchants: daemon CPU", run.core * 100, "% core")
    report.add(f"idle, {run.merchants} merchants: daemon RSS", run.rss_mb, "MB")
    report.add(f"idle, {run.merchants} merchants: daemon threads", run.threads, "")


# -- a takeover stuck in its write ----------------------------------------

TAKEOVER_MERCHANTS: Final = 10
CONFIRM_EVERY: Final = 0.2


@dataclass(frozen=True, slots=True)
class Takeover:
    stuck_seconds: float
    stuck: bool  # the takeover was still waiting when the pool's connection came back
    asked: int
    refused: int  # confirmed() answered False
    p50_ms: float
    p99_ms: float
    max_ms: float
    lost: int  # merchants no longer held at the end


def takeover(size: Size) -> Takeover:
    """The fleet test's scenario (tests/warehouse/test_warehouse_fleet.py) on a new database."""
    with harness.database("postgres") as url:
        store = Store.connect(url, pool_size=1, max_overflow=0, pool_timeout=60)
        store.migrate()
        session = store.fleet_session("bench-replica")
        merchants = [f"merchant-{n}" for n in range(TAKEOVER_MERCHANTS)]
        stop = threading.Event()
        seen: list[tuple[float, bool]] = []
        lock = threading.Lock()

        def poll(merchant_id: str) -> None:
            while not stop.is_set():
                asked = time.monotonic()
                answer = session.confirmed(merchant_id)
                with lock:
                    seen.append((time.monotonic() - asked, answer))
                stop.wait(CONFIRM_EVERY)

        try:
            for merchant_id in merchants:
                session.try_hold(merchant_id)
            pollers = [threading.Thread(target=poll, args=(m,), daemon=True) for m in merchants]
            taker = threading.Thread(target=lambda: session.try_hold("merchant-new"), daemon=True)
            with store.engine.connect():  # the pool's one connection: the takeover waits
                taker.start()
                for poller in pollers:
                    poller.start()
                time.sleep(size.stuck_seconds)
                stuck = taker.is_alive()
            taker.join(30)
            stop.set()
            for poller in pollers:
                poller.join(5)
            held = session.still_held()
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                session.close()
            store.close()
    took = sorted(seconds * 1000 for seconds, _answer in seen)
    return Takeover(
        stuck_seconds=size.stuck_seconds,
        stuck=stuck,
        asked=len(seen),
        refused=sum(1 for _seconds, answer in seen if not answer),
        p50_ms=statistics.median(took),
        p99_ms=took[min(len(took) - 1, int(0.99 * len(took)))],
        max_ms=took[-1],
        lost=len(set(merchants) - set(held)),
    )


def report_takeover(report: harness.Report, run: Takeover) -> None:
    name = f"takeover stuck {run.stuck_seconds:g} s, {TAKEOVER_MERCHANTS} merchants' confirmed()"
    if not run.stuck:
        report.note("the takeover did not wait for the pool: the figures below prove nothing")
    report.add(f"{name}: asked", run.asked, "")
    report.add(f"{name}: p50", run.p50_ms, "ms")
    report.add(f"{name}: p99", run.p99_ms, "ms", target="< 10", met=run.p99_ms < 10)
    report.add(f"{name}: max", run.max_ms, "ms")
    report.add(f"{name}: answered False", run.refused, "", target="0", met=run.refused == 0)
    report.add(f"{name}: merchants lost", run.lost, "", target="0", met=run.lost == 0)


# -- the schema lock held past the DDL sessions' idle limit ---------------

_SLEEPING: Final = '''"""Bench-only: a revision that runs for {seconds} s on the server."""

from alembic import op

revision = "9001"
down_revision = "{down}"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("SELECT SLEEP({seconds})")


def downgrade():
    pass
'''


@dataclass(frozen=True, slots=True)
class SchemaLockRun:
    idle_seconds: int
    held_seconds: float
    asked: int
    taken: int  # another session's GET_LOCK(..., 0) succeeded
    first_taken_at: float | None  # seconds into the revision
    finished: bool  # the upgrade reached the test-only revision
    error: str


def mariadb_reachable() -> bool:
    engine = create_warehouse_engine(harness.server_url("mariadb"), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception:  # noqa: BLE001 - any failure means: no MariaDB to measure on
        return False
    finally:
        engine.dispose()
    return True


def schema_lock_run(size: Size, folder: Path) -> SchemaLockRun:
    scripts = folder / "sleeping-migrations"
    shutil.copytree(script_location(), scripts, ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "versions" / "9001_sleep.py").write_text(
        _SLEEPING.format(seconds=size.migration_seconds, down=head_revision())
    )
    with harness.database("mariadb") as url:
        store = Store.connect(url)
        store.migrate()
        store.close()
        limits = dataclasses.replace(DDL, idle_session=size.ddl_idle_seconds)
        engine = create_warehouse_engine(url, limits=limits, poolclass=NullPool)
        other = create_warehouse_engine(url, poolclass=NullPool)
        name = f"recordsync-schema:{make_url(url).database}"[:64]
        raised: list[BaseException] = []

        def run() -> None:
            try:
                upgrade(engine, scripts=scripts)
            except BaseException as exc:  # noqa: BLE001 - reported below
                raised.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        try:
            with other.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                thread.start()
                deadline = time.monotonic() + 60
                while conn.execute(text("SELECT IS_USED_LOCK(:n)"), {"n": name}).scalar() is None:
                    if time.monotonic() > deadline or not thread.is_alive():
                        raise RuntimeError(f"the upgrade never took the lock: {raised}")
                    time.sleep(0.05)
                began = time.monotonic()
                asked, taken, first = 0, 0, None
                while thread.is_alive():
                    got = conn.execute(text("SELECT GET_LOCK(:n, 0)"), {"n": name}).scalar()
                    asked += 1
                    if got == 1:
                        taken += 1
                        first = first if first is not None else time.monotonic() - began
                        conn.execute(text("SELECT RELEASE_LOCK(:n)"), {"n": name})
                    time.sleep(0.5)
                thread.join()
            with engine.connect() as conn:
                finished = current_revision(conn) == "9001"
        finally:
            engine.dispose()
            other.dispose()
    return SchemaLockRun(
        idle_seconds=size.ddl_idle_seconds,
        held_seconds=size.migration_seconds,
        asked=asked,
        taken=taken,
        first_taken_at=first,
        finished=finished,
        error=str(raised[0]) if raised else "",
    )


def report_schema_lock(report: harness.Report, run: SchemaLockRun | None) -> None:
    if run is None:
        report.note("schemalock: no MariaDB reachable (RECORDSYNC_TEST_MARIADB_URL): skipped")
        return
    name = f"schemalock, a revision of {run.held_seconds:g} s, idle limit {run.idle_seconds} s"
    report.add(f"{name}: GET_LOCK(..., 0) asked", run.asked, "")
    report.add(
        f"{name}: another session got the lock", run.taken, "", target="0", met=run.taken == 0
    )
    if run.first_taken_at is not None:
        report.add(f"{name}: first taken after", run.first_taken_at, "s")
    report.add(
        f"{name}: upgrade finished", 1 if run.finished else 0, "", target="1", met=run.finished
    )
    if run.error:
        report.note(f"schemalock: the upgrade stopped: {run.error}")


# -- nine backfills on eight periodic threads ------------------------------

PERIODIC_MERCHANTS: Final = 9
PERIODIC_THREADS: Final = 8
PERIODIC_RATE: Final = 4  # record requests a second per merchant: the backfills keep it full
PERIODIC_RECORDS: Final = 6000  # per merchant: far more than the window reads at that rate


class _Checks(SyncObserver):
    """When each periodic check of one merchant ended, on the monotonic clock."""

    def __init__(self, merchant: str, seen: dict[tuple[str, str], list[float]]) -> None:
        self._merchant = merchant
        self._seen = seen

    def _ran(self, kind: str) -> None:
        self._seen[(kind, self._merchant)].append(time.monotonic())

    def drift_checked(self, window: Window, rows_behind: int) -> None:
        self._ran("drift")

    def catalogue_refreshed(self, games: int, seconds: float) -> None:
        self._ran("catalogue")

    def rounds_checked(self, missing: int) -> None:
        self._ran("cross-check")


@dataclass(frozen=True, slots=True)
class Periodic:
    intervals: dict[str, float]
    gaps: dict[str, float]  # kind -> the longest gap of any merchant
    drift_age: float  # the largest drift check age scraped
    deferrals: float  # drift check deferrals, every merchant
    backfilling: bool  # every backfill still read at the window's end
    violations: int


def _history_days() -> float:
    """History after the last UTC midnight, so the drift check's last closed day holds none
    of it: a check is one page, however the day falls (as the test does)."""
    now = datetime.now(UTC)
    since_midnight = (now - now.replace(hour=0, minute=0, second=0, microsecond=0)).seconds
    if since_midnight < 90:
        time.sleep(90 - since_midnight)
        since_midnight = 90
    return min(0.05, (since_midnight - 60) / 86400)


def periodic(size: Size) -> Periodic:
    """tests/service/test_periodic_pool_backfills.py, sized by ``size``."""
    drift = size.drift_seconds
    intervals = {"drift": drift, "catalogue": drift * 2 / 3, "cross-check": drift / 3}
    days = _history_days()
    config = SimConfig(
        merchant_id="m-pool",
        seed=38,
        history_days=days,
        rounds_per_day=int(PERIODIC_RECORDS / days),
        record_requests=PERIODIC_RATE,
        record_seconds=1,
    ).with_merchants(PERIODIC_MERCHANTS)
    sim = Simulator(config)
    sim.start()
    try:
        with harness.database("postgres") as url:
            result = _periodic_run(sim, url, intervals, size.periodic_window)
    finally:
        sim.stop()
    return result


def _periodic_run(sim: Simulator, url: str, intervals: dict[str, float], window: float) -> Periodic:
    now = floor_ms(sim.now())
    settings = Settings(
        merchants=tuple(
            MerchantSettings(
                profile.merchant_id,
                SecretSource.given(Secret(profile.secret)),
                sim.base_url,
                now - timedelta(minutes=1),
            )
            for profile in sim.config.profiles
        ),
        database_url=url,
        page_size=25,
        poll_interval=0.2,
        poll_ceiling=1.6,
        snapshot_concurrency=2,
        drift_check_interval=intervals["drift"],
        catalogue_interval=intervals["catalogue"],
        events_port=1,  # notifications received (nothing listens here): cross-checks run
        event_grace=4 * intervals["cross-check"],
        http_timeout=5.0,
    )
    warehouse = Store.connect(url)
    warehouse.migrate()
    session = warehouse.fleet_session("holder", lease_seconds=120)
    seen: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    stopper, metrics = Stopper(), Metrics()
    host = JobHost(periodic_threads=PERIODIC_THREADS, worker_threads=16)
    syncs = MerchantSyncs(
        settings,
        warehouse=warehouse,
        secrets=SecretKeeper.from_settings(settings),
        metrics=metrics,
        host=host,
        stopper=stopper,
        replica_id="holder",
        extra_observer=lambda merchant: _Checks(merchant, seen),
        request_poll=0.05,
    )
    merchants = list(sim.merchant_ids)

    def sample(name: MetricName, merchant: str) -> float:
        return metrics.registry.get_sample_value(name, {MERCHANT_LABEL: merchant}) or 0.0

    def tailing() -> bool:
        states = [warehouse.state.load_state(merchant) for merchant in merchants]
        return all(state is not None and state.phase is Phase.TAILING for state in states)

    try:
        for merchant in merchants:
            epoch = session.try_hold(merchant)
            assert epoch is not None
            syncs.start(merchant, epoch)
        harness.wait_until(tailing, period=0.1, timeout=120)
        start, end = now - timedelta(days=1), now - timedelta(minutes=1)
        requests = [
            warehouse.requests.ask(
                merchant, RequestKind.BACKFILL, start, end, key=backfill_job(start, end)
            )
            for merchant in merchants
        ]
        harness.wait_until(
            lambda: all(_request(warehouse, r) is RequestState.RUNNING for r in requests)
        )
        time.sleep(2 * intervals["drift"])  # every drift check now meets a full budget
        deferred = sum(sample(MetricName.DRIFT_CHECK_DEFERRALS, m) for m in merchants)
        began = time.monotonic()
        age = 0.0
        while time.monotonic() < began + window:
            age = max(age, *(sample(MetricName.DRIFT_CHECK_AGE, m) for m in merchants))
            time.sleep(0.25)
        ended = time.monotonic()
        deferred = sum(sample(MetricName.DRIFT_CHECK_DEFERRALS, m) for m in merchants) - deferred
        backfilling = all(_request(warehouse, r) is RequestState.RUNNING for r in requests)
    finally:
        stopper.stop()
        for merchant in merchants:
            syncs.stop(merchant)
        for thread in threading.enumerate():  # the handed-over requests' own threads
            if thread.name.startswith("backfill-") or thread.name == "holder-requests":
                thread.join(timeout=30)
        session.close()
        host.shutdown()
        warehouse.close()
    gaps = {
        kind: max(_longest_gap(seen[(kind, m)], began, ended) for m in merchants)
        for kind in intervals
    }
    return Periodic(
        intervals=intervals,
        gaps=gaps,
        drift_age=age,
        deferrals=deferred,
        backfilling=backfilling,
        violations=sim.stats().rate_limit_violations,
    )


def _request(warehouse: Store, request_id: int) -> RequestState | None:
    request = warehouse.requests.get(request_id)
    if request is not None and request.state is RequestState.FAILED:
        raise RuntimeError(f"the backfill failed at the holder: {request.error}")
    return None if request is None else request.state


def _longest_gap(times: list[float], start: float, end: float) -> float:
    marks = [start, *(t for t in times if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(marks))


def report_periodic(report: harness.Report, run: Periodic) -> None:
    name = f"periodic, {PERIODIC_MERCHANTS} backfills on {PERIODIC_THREADS} threads"
    if not run.backfilling:
        report.note("periodic: a backfill ended within the window: the figures prove less")
    for kind, gap in run.gaps.items():
        bound = 2 * run.intervals[kind]
        report.add(
            f"{name}: longest {kind} gap (every {run.intervals[kind]:g} s)",
            gap,
            "s",
            target=f"<= {bound:g}",
            met=gap <= bound,
        )
    bound = 2 * run.intervals["drift"]
    report.add(
        f"{name}: largest drift check age scraped",
        run.drift_age,
        "s",
        target=f"<= {bound:g}",
        met=run.drift_age <= bound,
    )
    report.add(f"{name}: drift check deferrals in the window", run.deferrals, "")
    report.add(
        f"{name}: rate-limit violations", run.violations, "", target="0", met=run.violations == 0
    )


# -- the two ports under strangers --------------------------------------------------

STRANGERS: Final = 250
STRANGER_BODY: Final = 1024 * 1024
METRICS_READERS: Final = 8
HEALTHZ_EVERY: Final = 0.5
LIVENESS_TIMEOUT: Final = 5.0


@dataclass(frozen=True, slots=True)
class Events:
    merchants: int
    rss_before_mb: float
    rss_peak_mb: float
    signed_status: int
    signed_seconds: float
    refusal_lines: int


@dataclass(frozen=True, slots=True)
class Probes:
    merchants: int
    metrics_bytes: int
    healthz_slowest: float
    healthz_failed: int


def _ports_daemon(
    merchants: int, size: Size, folder: Path, name: str, tree: Path | None
) -> contextlib.AbstractContextManager[tuple[Any, Any, int, int, Path]]:
    """A tailing daemon of ``merchants`` with both ports: (sim, process, events port, probe
    port, log)."""

    @contextlib.contextmanager
    def running() -> Iterator[tuple[Any, Any, int, int, Path]]:
        days, rounds = HISTORY
        with (
            harness.sim_process(
                history_days=days,
                rounds_per_day=rounds,
                record_requests=2,
                merchants=merchants,
            ) as sim,
            harness.database("postgres") as url,
        ):
            port, events_port = harness.free_ports(2)
            config = write_config(
                sim.base_url,
                sim.merchants,
                url,
                folder,
                port,
                f"events_port = {events_port}",
                'events_host = "127.0.0.1"',
            )
            log = folder / f"{name}.log"
            warehouse = Warehouse(url)
            try:
                with daemon(config, log, tree=tree) as process:
                    harness.wait_until(lambda: warehouse.tailing() == merchants, (process, log))
                    time.sleep(size.settle_seconds)
                    yield sim, process, events_port, port, log
            finally:
                warehouse.close()

    return running()


def _strangers(port: int, count: int, body_size: int, timeout: float) -> None:
    """``count`` connections each sending a head naming no merchant and a body of
    ``body_size`` bytes, as fast as the server takes them."""
    head = (
        b"POST /v1/round-events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"X-Merchant-Id: nobody\r\nX-Timestamp: " + str(int(time.time())).encode() + b"\r\n"
        b"X-Signature: "
        + b"0" * 64
        + b"\r\nContent-Length: "
        + str(body_size).encode()
        + b"\r\n\r\n"
    )
    body = memoryview(b"x" * body_size)
    sent: dict[socket.socket, int] = {}
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(head)
        sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
        sent[sock] = 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            sending = [sock for sock, done in sent.items() if 0 <= done < body_size]
            if not sending:
                break
            for sock in select.select([], sending, [], 0.1)[1]:
                try:
                    sent[sock] += sock.send(body[sent[sock] : sent[sock] + 65536])
                except BlockingIOError:
                    continue
                except OSError:  # refused and closed by the server
                    sent[sock] = -1
    finally:
        for sock in sent:
            sock.close()


def _signed_notification(port: int, merchant_id: str, secret: str) -> tuple[int, float]:
    event_id = f"bench-{time.time_ns()}"
    body = json.dumps(
        {
            "event_id": event_id,
            "external_player_id": "bench-player",
            "currency": "USD",
            "round_id": f"round-{event_id}",
            "type": "ROUND_ENDED",
            "occurred_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        }
    ).encode()
    timestamp = format_timestamp(time.time())
    path = "/v1/round-events"
    headers = {
        "X-Merchant-Id": merchant_id,
        "X-Timestamp": timestamp,
        "X-Signature": sign(
            secret,
            timestamp=timestamp,
            method="POST",
            target=path,
            idempotency_key=event_id,
            body=body,
        ),
        "Idempotency-Key": event_id,
        "Content-Type": "application/json",
    }
    started = time.monotonic()
    reply = httpx.post(f"http://127.0.0.1:{port}{path}", content=body, headers=headers, timeout=30)
    return reply.status_code, time.monotonic() - started


def events(size: Size, folder: Path, tree: Path | None) -> Events:
    with _ports_daemon(size.event_merchants, size, folder, "events", tree) as (
        sim,
        process,
        events_port,
        _port,
        log,
    ):
        before = harness.resident_mb(process.pid)
        Path(f"/proc/{process.pid}/clear_refs").write_text("5")  # the peak starts again here
        flooding = threading.Thread(
            target=_strangers, args=(events_port, STRANGERS, STRANGER_BODY, 15.0)
        )
        flooding.start()
        time.sleep(0.3)
        merchant_id, secret = sim.merchants[0]
        status, seconds = _signed_notification(events_port, merchant_id, secret)
        flooding.join()
        peak = harness.resident_mb(process.pid, peak=True)
        lines = log.read_text(errors="replace").count('"round_event_refused"')
    return Events(size.event_merchants, before, peak, status, seconds, lines)


def _never_reading(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    return sock


def probes(size: Size, folder: Path, tree: Path | None) -> Probes:
    with _ports_daemon(size.probe_merchants, size, folder, "probes", tree) as (
        _sim,
        _process,
        _events,
        port,
        _log,
    ):
        metrics_bytes = len(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).content)
        readers = [_never_reading(port) for _ in range(METRICS_READERS)]
        slowest, failed = 0.0, 0
        try:
            started = time.monotonic()
            while time.monotonic() - started < max(size.window_seconds, 3 * LIVENESS_TIMEOUT):
                asked = time.monotonic()
                try:
                    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=LIVENESS_TIMEOUT)
                except httpx.TransportError:
                    failed += 1
                took = time.monotonic() - asked
                slowest = max(slowest, took)
                time.sleep(max(0.0, HEALTHZ_EVERY - took))
        finally:
            for sock in readers:
                sock.close()
    return Probes(size.probe_merchants, metrics_bytes, slowest, failed)


def report_events(report: harness.Report, run: Events) -> None:
    name = f"events, {STRANGERS} strangers x 1 MiB, {run.merchants} merchants"
    report.add(f"{name}: daemon RSS before", run.rss_before_mb, "MB")
    growth = run.rss_peak_mb - run.rss_before_mb
    report.add(f"{name}: peak RSS growth", growth, "MB", target="< 20", met=growth < 20)
    report.add(
        f"{name}: signed notification answered",
        run.signed_seconds * 1000,
        "ms",
        target="200 within 1000",
        met=run.signed_status == 200 and run.signed_seconds < 1.0,
    )
    report.add(f"{name}: refusal lines logged", run.refusal_lines, "")


def report_probes(report: harness.Report, run: Probes) -> None:
    name = f"probes, {METRICS_READERS} /metrics never read, {run.merchants} merchants"
    report.add(f"{name}: /metrics size", run.metrics_bytes / 1024, "KiB")
    report.add(
        f"{name}: slowest /healthz",
        run.healthz_slowest * 1000,
        "ms",
        target="< 500",
        met=run.healthz_slowest < 0.5 and not run.healthz_failed,
    )
    report.add(f"{name}: /healthz past {LIVENESS_TIMEOUT:g} s", run.healthz_failed, "")


PARTS: Final = (
    "all",
    "catalogue",
    "refused",
    "idle",
    "events",
    "probes",
    "takeover",
    "schemalock",
    "periodic",
)


def main() -> int:
    args = harness.arguments(
        __doc__.splitlines()[0],
        [
            ("--part", {"choices": PARTS, "default": "all"}),
            ("--tree", {"type": Path, "default": None, "help": "run the daemon from there"}),
        ],
    )
    tree = None if args.tree is None else args.tree.resolve()
    size = SIZES[args.size]
    report = harness.Report("isolation: failing features and merchants, PostgreSQL", args.size)
    report.header()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        if args.part in {"all", "catalogue"}:
            report_catalogue(report, catalogue(size, folder))
        if args.part in {"all", "refused"}:
            report_refused(report, refused(size, folder))
        if args.part in {"all", "idle"}:
            report_idle(report, idle(size, folder))
        if args.part in {"all", "events"}:
            report_events(report, events(size, folder, tree))
        if args.part in {"all", "probes"}:
            report_probes(report, probes(size, folder, tree))
        if args.part in {"all", "takeover"}:
            report_takeover(report, takeover(size))
        if args.part in {"all", "schemalock"}:
            report_schema_lock(
                report, schema_lock_run(size, folder) if mariadb_reachable() else None
            )
        if args.part in {"all", "periodic"}:
            report_periodic(report, periodic(size))
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
