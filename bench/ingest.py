"""Benchmark 2, the ingest ceiling: records/s end to end with the rate limit lifted.

The simulator runs in its own process (its own GIL) and serves a history of ``rounds`` records
over loopback HTTP; recordsync backfills the whole range into a fresh SQLite file, PostgreSQL
database and MariaDB database in turn: request, sign, parse, validate, upsert, commit, exactly
as ``recordsync backfill`` does (``MerchantCommand`` + ``SyncEngine.backfill``).  The baseline is a
plain standard-library client against the same simulator: http.client, hmac, json and sqlite3
``executemany`` into a one-index table, one commit per page, no validation.

CPU per record is given for our process, the simulator's and the database server's: on two
cores they share the machine, so every microsecond one spends caps the others.

    .venv/bin/python bench/ingest.py [--size tiny|full] [--profile sqlite [--gil]]
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import sqlite3
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlsplit

import harness
import profiling
from sqlalchemy import text

from recordsync.core.stopping import Stopper
from recordsync.logs import configure_logging
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.sim import DEMO_MERCHANT_ID, DEMO_SECRET

SIZES: Final = {
    # history_days, rounds_per_day
    "tiny": (0.5, 6_000),
    "full": (4.0, 100_000),
}
# Issue 14's targets, each judged where it is printed: MariaDB in records/s; PostgreSQL in our
# own CPU per record (parse, validate, encode, write, revision history on), which decides how
# many merchants a replica carries; SQLite, whose one writer is our process, as a share of
# the standard-library baseline's rate in the same run.
TARGETS: Final = {"mariadb": 15_000}
# --drift: the simulator's records carry these unknown members (sim --add-field).
DRIFT_FIELDS: Final = (
    "--add-field",
    "channel:string",
    "--add-field",
    "tax_amount:decimal",
    "--add-field",
    "jackpot:object",
)
# Their sizes are reported after a MariaDB run (information_schema, after ANALYZE TABLE).
MARIADB_TABLES: Final = ("records", "record_revisions")
POSTGRES_CPU_TARGET_US: Final = 20.0
SQLITE_BASELINE_SHARE: Final = 0.5
# The budget starts paused for one window after a (re)start, by design (budget.py,
# cold_start): not a throughput cost, so the measurement starts after it.
COLD_START_SECONDS: Final = 1.1


def recordsync_backfill(
    base_url: str,
    database_url: str,
    start: datetime,
    end: datetime,
    *,
    concurrency: int,
    profile: Path | None,
    gil: bool = False,
    keep_revisions: bool = True,
) -> dict[str, Any]:
    settings = harness.settings_for(
        base_url,
        database_url,
        start,
        page_size=1000,
        snapshot_concurrency=concurrency,
        keep_revisions=keep_revisions,
    )
    with MerchantCommand(settings, None, Stopper()) as app:
        time.sleep(COLD_START_SECONDS)
        cpu = harness.own_cpu_seconds()
        started = time.perf_counter()
        if profile is None:
            result = app.tail.backfill(start, end)
        else:
            with profiling.py_spy(profile, gil=gil):
                result = app.tail.backfill(start, end)
        seconds = time.perf_counter() - started
        cpu = harness.own_cpu_seconds() - cpu
        with app.warehouse.engine.connect() as conn:
            stored = conn.execute(text("SELECT count(*) FROM records")).scalar_one()
    outcome = {"records": result.records, "stored": stored, "seconds": seconds, "cpu": cpu}
    if database_url.startswith("mysql"):
        outcome["tables_mb"] = harness.mariadb_table_mb(database_url, MARIADB_TABLES)
    return outcome


def _with_innodb_counters(run: Any) -> dict[str, Any]:
    """``run()``'s outcome with what InnoDB's counters moved by meanwhile (``innodb``)."""
    before = harness.mariadb_counters()
    outcome: dict[str, Any] = run()
    after = harness.mariadb_counters()
    outcome["innodb"] = {key: after[key] - before[key] for key in before}
    return outcome


# -- the baseline: a plain standard-library client ------------------------------------------

_COLUMNS: Final = (
    "record_id",
    "revision",
    "player_id",
    "game_id",
    "currency",
    "round_id",
    "parent_round_id",
    "bet_amount",
    "refund_amount",
    "payout_amount",
    "net_amount",
    "status",
    "created_at",
    "settled_at",
    "updated_at",
)


def _stdlib_get(conn: http.client.HTTPConnection, target: str) -> dict[str, Any]:
    timestamp = f"{int(time.time()):010d}"
    message = f"{timestamp}\nGET\n{target}\n\n\n".encode()
    signature = hmac.new(DEMO_SECRET.encode(), message, hashlib.sha256).hexdigest()
    headers = {
        "X-Merchant-Id": DEMO_MERCHANT_ID,
        "X-Timestamp": timestamp,
        "X-Signature": signature,
    }
    conn.request("GET", target, headers=headers)
    response = conn.getresponse()
    body = response.read()
    if response.status != 200:
        raise RuntimeError(f"baseline: HTTP {response.status}: {body[:200]!r}")
    data: dict[str, Any] = json.loads(body)["data"]
    return data


def stdlib_baseline(base_url: str, start: datetime, end: datetime) -> dict[str, Any]:
    address = urlsplit(base_url)
    conn = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port)
    with tempfile.TemporaryDirectory() as folder:
        db = sqlite3.connect(Path(folder) / "baseline.db", isolation_level=None)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute(
            f"CREATE TABLE records (merchant_id TEXT, {', '.join(_COLUMNS)}, "
            "PRIMARY KEY (merchant_id, record_id))"
        )
        updates = ", ".join(f"{name} = excluded.{name}" for name in _COLUMNS[1:])
        # Built from the constant column names above.
        upsert = (
            f"INSERT INTO records VALUES ({', '.join('?' * (len(_COLUMNS) + 1))}) "
            f"ON CONFLICT (merchant_id, record_id) DO UPDATE SET {updates} "
            "WHERE records.revision < excluded.revision"
        )
        count = 0
        cpu = harness.own_cpu_seconds()
        started = time.perf_counter()
        window = start
        while window < end:
            window_end = min(window + timedelta(hours=24), end)
            query = (
                f"created_from={quote(harness.iso_ms(window), safe='')}"
                f"&created_to={quote(harness.iso_ms(window_end), safe='')}&limit=1000"
            )
            target = f"/v1/records?{query}"
            while True:
                data = _stdlib_get(conn, target)
                rows = [
                    (DEMO_MERCHANT_ID, *(item.get(name) for name in _COLUMNS))
                    for item in data["items"]
                ]
                db.execute("BEGIN")
                db.executemany(upsert, rows)
                db.execute("COMMIT")
                count += len(rows)
                if not data["has_more"]:
                    break
                target = f"/v1/records?cursor={quote(data['next_cursor'], safe='')}&limit=1000"
            window = window_end
        seconds = time.perf_counter() - started
        cpu = harness.own_cpu_seconds() - cpu
        db.close()
    conn.close()
    return {"records": count, "seconds": seconds, "cpu": cpu}


# -- the benchmark ---------------------------------------------------------------------------


def main() -> int:
    args = harness.arguments(
        __doc__.splitlines()[0],
        [
            ("--backends", {"default": ",".join(harness.BACKENDS)}),
            ("--concurrency", {"type": int, "default": 4, "help": "snapshot_concurrency"}),
            ("--profile", {"default": "", "help": "backends to sample with py-spy (a,b)"}),
            (
                "--gil",
                {"action": "store_true", "help": "profile only the GIL's holder: our own CPU"},
            ),
            (
                "--mariadb-buffer-pool-mib",
                {"type": int, "default": 0, "help": "also run MariaDB with this buffer pool"},
            ),
            (
                "--drift",
                {
                    "action": "store_true",
                    "help": "records carry three members recordsync does not know (a string, a "
                    "30-digit decimal, a nested object), kept in extra_fields",
                },
            ),
            (
                "--without-history",
                {"action": "store_true", "help": "also run with RECORDSYNC_KEEP_REVISIONS off"},
            ),
        ],
    )
    configure_logging(level="warning", log_format="console")
    history_days, rounds_per_day = SIZES[args.size]
    report = harness.Report("ingest ceiling, rate limit lifted", args.size)
    report.header()
    drift = DRIFT_FIELDS if args.drift else ()
    with harness.sim_process(
        history_days=history_days, rounds_per_day=rounds_per_day, extra=drift
    ) as sim:
        end = datetime.now(UTC)
        start = end - timedelta(days=history_days, hours=1)
        report.note(f"{sim.records:,} records over {history_days} days; simulator pid {sim.pid}")

        def measured(name: str, run: Any) -> dict[str, Any]:
            sim_cpu, db_cpu = sim.cpu_seconds(), harness.server_cpu_seconds(name)
            outcome = _with_innodb_counters(run) if name == "mariadb" else run()
            outcome["sim_cpu"] = sim.cpu_seconds() - sim_cpu
            outcome["db_cpu"] = harness.server_cpu_seconds(name) - db_cpu
            records = outcome["records"]
            # A record read twice (a window cut or carried at its first millisecond) counts
            # twice in ``records``; the rows stored must be the history, no more, no less.
            stored = outcome.get("stored", records)
            if stored != sim.records:
                report.note(f"{name}: {stored:,} rows stored, expected {sim.records:,}")
            outcome["rate"] = records / outcome["seconds"]
            return outcome

        def backfilled(
            backend: str, url: str, profile: Path | None = None, **options: Any
        ) -> dict[str, Any]:
            return measured(
                backend,
                lambda: recordsync_backfill(
                    sim.base_url,
                    url,
                    start,
                    end,
                    concurrency=args.concurrency,
                    profile=profile,
                    gil=args.gil,
                    **options,
                ),
            )

        baseline = measured("baseline", lambda: stdlib_baseline(sim.base_url, start, end))
        report.add("stdlib baseline (json + sqlite3), records/s", baseline["rate"], "rec/s")
        _cpu_figures(report, "stdlib baseline", baseline)
        for backend in args.backends.split(","):
            profile = None
            if backend in args.profile.split(","):
                profile = Path(tempfile.gettempdir()) / f"recordsync-ingest-{backend}.txt"
            with harness.database(backend) as url:
                outcome = backfilled(backend, url, profile)
            target = TARGETS.get(backend)
            report.add(
                f"recordsync -> {backend}, records/s",
                outcome["rate"],
                "rec/s",
                target="" if target is None else f">= {target:,}",
                met=None if target is None else outcome["rate"] >= target,
            )
            _cpu_figures(report, f"recordsync -> {backend}", outcome)
            _judge(report, backend, outcome, baseline)
            if args.without_history:
                with harness.database(backend) as url:
                    bare = backfilled(backend, url, keep_revisions=False)
                report.add(f"  {backend} without the revision history", bare["rate"], "rec/s")
            if backend == "mariadb" and args.mariadb_buffer_pool_mib:
                mib = args.mariadb_buffer_pool_mib
                with harness.mariadb_buffer_pool(mib), harness.database(backend) as url:
                    sized = backfilled(backend, url)
                report.add(
                    f"  mariadb with a {mib} MiB buffer pool, records/s",
                    sized["rate"],
                    "rec/s",
                    target=f">= {target:,}",
                    met=sized["rate"] >= target,
                )
                _cpu_figures(report, f"  mariadb, {mib} MiB buffer pool", sized)
            if profile is not None:
                print(f"  where the time goes ({backend}, py-spy, share of the working samples):")
                for layer, share in profiling.summarise(profile):
                    print(f"    {share * 100:5.1f}%  {layer}")
                print(f"  raw samples: {profile}")
    return report.finish(check=args.check)


def _judge(
    report: harness.Report, backend: str, outcome: dict[str, Any], baseline: dict[str, Any]
) -> None:
    """Issue 14's figures for SQLite and PostgreSQL (MariaDB's is its records/s)."""
    if backend == "sqlite":
        share = outcome["rate"] / baseline["rate"]
        report.add(
            "  sqlite / stdlib baseline, same run",
            share,
            "x",
            target=f">= {SQLITE_BASELINE_SHARE}",
            met=share >= SQLITE_BASELINE_SHARE,
        )
    elif backend == "postgres":
        cpu = outcome["cpu"] / max(outcome["records"], 1) * 1e6
        report.add(
            "  postgres: our CPU per record, judged",
            cpu,
            "us",
            target=f"<= {POSTGRES_CPU_TARGET_US:.0f}",
            met=cpu <= POSTGRES_CPU_TARGET_US,
        )
        # Not judged: how fast the VM ran, which moves the figure above by 2x between days
        # (the baseline's own CPU a record: 23.6 us on 2026-11-25, 41 to 51 us on 11-27).
        baseline_cpu = baseline["cpu"] / max(baseline["records"], 1) * 1e6
        report.add(
            "  postgres: our CPU per record / the baseline's, same run", cpu / baseline_cpu, "x"
        )


def _cpu_figures(report: harness.Report, name: str, outcome: dict[str, Any]) -> None:
    records = max(outcome["records"], 1)
    report.add(f"  {name}: our CPU per record", outcome["cpu"] / records * 1e6, "us")
    report.add(f"  {name}: simulator CPU per record", outcome["sim_cpu"] / records * 1e6, "us")
    if outcome["db_cpu"]:
        server = outcome["db_cpu"] / records * 1e6
        report.add(f"  {name}: database server CPU per record", server, "us")
    for counter, value in outcome.get("innodb", {}).items():
        report.add(f"  {name}: {counter} per record (whole server)", value / records, "")
    for table, (data, indexes) in outcome.get("tables_mb", {}).items():
        report.note(f"{name}: {table} {data:.0f} MB of rows, {indexes:.0f} MB of indexes")


if __name__ == "__main__":
    raise SystemExit(main())
