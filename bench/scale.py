"""Benchmark 11, the warehouse at the size an operator has after a year (issue 36).

Builds an N-row warehouse quickly, in SQL on the server (``generate_series`` on PostgreSQL,
the sequence engine's ``seq_1_to_N`` on MariaDB, a recursive CTE on SQLite), at this
version's schema: one merchant, N rounds spread evenly over 365 days up to the build's own
"now", 200 games, 50 000 players, two currencies, one revision each in ``record_revisions``,
and a sync state.  Then times what dashboards and operators ask of it:

- the dashboard queries (each the median of 5 after one warm-up, through SQLAlchemy on one
  connection): GGR per UTC day over the last 30 days, the top 10 games by GGR over the last
  7 days, today's totals by currency (from ``daily_game_summary``), and one player's month
  (``daily_player_summary``);
- ``recordsync report --days 7 --by game``, ``status``, the dry runs (``backfill`` of one day,
  ``verify`` of 30, ``merchant reset`` of the whole year), ``merchant state export`` and a
  ``verify`` of one day, each a whole process: its wall time and peak RSS (run at two sizes,
  the RSS says whether memory grows with the rows);
- bytes per round, by part: each table, its indexes and each index alone;
- a ``recordsync backfill`` of a simulator's two days (200 000 records) into the big warehouse
  and into an empty database in the same run (empty, big, empty): records/s, our CPU per record, and
  on PostgreSQL the CPU of the backends serving that database alone per record (the server is
  shared; ``harness.BackendCpu``).

The targets are issue 36's (<= 50 ms a dashboard query, <= 1.5 s ``report``, <= 1 s
``status``), judged at full size only.  Full size: 20 000 000 rows on PostgreSQL, 5 000 000
on MariaDB, 2 000 000 on SQLite; ``--rows`` sets another N; ``--keep URL`` is not offered:
the database is dropped afterwards, as every benchmark's is.

    .venv/bin/python bench/scale.py [--size tiny|full] [--check]
        [--backend postgres|mariadb|sqlite] [--rows N]
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import harness
from sqlalchemy import Connection, create_engine, pool, text

from recordsync.sim import DEMO_SECRET
from recordsync.warehouse import Warehouse

MERCHANT: Final = "scale-merchant"
DAYS: Final = 365
GAMES: Final = 200
PLAYERS: Final = 50_000
FULL_ROWS: Final = {"postgres": 20_000_000, "mariadb": 5_000_000, "sqlite": 2_000_000}
TINY_ROWS: Final = 20_000
QUERY_TARGET_MS: Final = 50.0
REPORT_TARGET_S: Final = 1.5
STATUS_TARGET_S: Final = 1.0
REPEATS: Final = 5
TABLES: Final = ("records", "record_revisions")
# The backfill timed into the big warehouse and into an empty one: the simulator's history of
# this many days at this many rounds a day (served as the big warehouse's merchant, so its
# rows land among the big one's in every index).
BACKFILL_DAYS: Final = 2
BACKFILL_ROUNDS_PER_DAY: Final = {"tiny": 2_000, "full": 100_000}

# One round's columns as SQL over a row number ``g`` and the build's end time; the same rows
# on every backend (the functions differ: hashing, time arithmetic, text).
_AMOUNT = "((g * 7919) % 100000) / 100.0"


def _postgres_rows(rows: int) -> str:
    step = DAYS * 86400.0 / rows
    return f"""
        INSERT INTO records (merchant_id, record_id, revision, player_id, game_id, currency,
            round_id, parent_round_id, bet_amount, refund_amount, payout_amount, net_amount,
            status, created_at, settled_at, updated_at, synced_at,
            bet_units, refund_units, payout_units, net_units)
        SELECT '{MERCHANT}', md5(g::text), 1, 'player-' || (g % {PLAYERS}),
            'game-' || (g % {GAMES}), CASE WHEN g % 5 = 0 THEN 'USD' ELSE 'EUR' END,
            'round-' || g, NULL, b, 0, p, p - b,
            CASE WHEN g % 50 = 0 THEN 'OPEN' ELSE 'SETTLED' END,
            t, CASE WHEN g % 50 = 0 THEN NULL ELSE t END, t, t,
            (b * 10000)::bigint, 0, (p * 10000)::bigint, ((p - b) * 10000)::bigint
        FROM (
            SELECT g, round(({_AMOUNT})::numeric, 2) AS b,
                round(({_AMOUNT} * 0.96)::numeric, 2) AS p,
                :end - make_interval(secs => (:rows - g) * {step}) AS t
            FROM generate_series(1::bigint, :rows) AS g
        ) AS source
    """


def _mariadb_rows(rows: int) -> str:
    step_us = int(DAYS * 86400 * 1_000_000 / rows)
    return f"""
        INSERT INTO records (merchant_id, record_id, revision, player_id, game_id, currency,
            round_id, parent_round_id, bet_amount, refund_amount, payout_amount, net_amount,
            status, created_at, settled_at, updated_at, synced_at,
            bet_units, refund_units, payout_units, net_units)
        SELECT '{MERCHANT}', md5(g), 1, CONCAT('player-', g % {PLAYERS}),
            CONCAT('game-', g % {GAMES}), IF(g % 5 = 0, 'USD', 'EUR'),
            CONCAT('round-', g), NULL, b, 0, p, p - b, IF(g % 50 = 0, 'OPEN', 'SETTLED'),
            t, IF(g % 50 = 0, NULL, t), t, t,
            CAST(b * 10000 AS SIGNED), 0, CAST(p * 10000 AS SIGNED),
            CAST((p - b) * 10000 AS SIGNED)
        FROM (
            SELECT seq AS g, ROUND({_AMOUNT.replace("g", "seq")}, 2) AS b,
                ROUND({_AMOUNT.replace("g", "seq")} * 0.96, 2) AS p,
                TIMESTAMPADD(MICROSECOND, -(:rows - seq) * {step_us}, :end) AS t
            FROM seq_1_to_{rows}
        ) AS source
    """


def _sqlite_rows(rows: int) -> str:
    step = DAYS * 86400.0 / rows
    return f"""
        WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < :rows),
        source AS (
            SELECT g, (g * 7919) % 100000 AS b_cents,
                ((g * 7919) % 100000) * 96 / 100 AS p_cents,
                strftime('%Y-%m-%dT%H:%M:%f', :end, '-' || ((:rows - g) * {step}) || ' seconds')
                    || '000+00:00' AS t
            FROM n
        )
        INSERT INTO records (merchant_id, record_id, revision, player_id, game_id, currency,
            round_id, parent_round_id, bet_amount, refund_amount, payout_amount, net_amount,
            status, created_at, settled_at, updated_at, synced_at,
            bet_units, refund_units, payout_units, net_units)
        SELECT '{MERCHANT}', printf('%032x', g), 1, 'player-' || (g % {PLAYERS}),
            'game-' || (g % {GAMES}), CASE WHEN g % 5 = 0 THEN 'USD' ELSE 'EUR' END,
            'round-' || g, NULL, printf('%d.%02d', b_cents / 100, b_cents % 100), '0',
            printf('%d.%02d', p_cents / 100, p_cents % 100),
            CASE WHEN p_cents - b_cents < 0 THEN '-' ELSE '' END
                || printf('%d.%02d', abs(p_cents - b_cents) / 100, abs(p_cents - b_cents) % 100),
            CASE WHEN g % 50 = 0 THEN 'OPEN' ELSE 'SETTLED' END,
            t, CASE WHEN g % 50 = 0 THEN NULL ELSE t END, t, t,
            b_cents * 100, 0, p_cents * 100, (p_cents - b_cents) * 100
        FROM source
    """


_ROWS: Final = {"postgres": _postgres_rows, "mariadb": _mariadb_rows, "sqlite": _sqlite_rows}
_REVISIONS: Final = """
    INSERT INTO record_revisions (merchant_id, record_id, revision, player_id, game_id, currency,
        round_id, parent_round_id, bet_amount, refund_amount, payout_amount, net_amount, status,
        created_at, settled_at, updated_at, sequence, changed_at, synced_at)
    SELECT merchant_id, record_id, revision, player_id, game_id, currency, round_id,
        parent_round_id, bet_amount, refund_amount, payout_amount, net_amount, status,
        created_at, settled_at, updated_at, NULL, NULL, synced_at
    FROM records
"""


def _postgres_unindexed(conn: Connection) -> list[str]:
    """Drop the keys and indexes of both tables; the statements that put them back as they
    were.  Twenty million random keys inserted one by one into B-trees bigger than the cache
    take an hour here; built once from sorted rows, minutes."""
    conn.exec_driver_sql("SET maintenance_work_mem = '512MB'")
    tables = "('records'::regclass, 'record_revisions'::regclass)"
    keys = conn.exec_driver_sql(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        f"WHERE contype = 'p' AND conrelid IN {tables}"
    ).all()
    indexes = conn.exec_driver_sql(
        "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index "
        f"WHERE indrelid IN {tables} AND NOT indisprimary"
    ).all()
    for name, _ in indexes:
        conn.exec_driver_sql(f"DROP INDEX {name}")
    for table, name, _ in keys:
        conn.exec_driver_sql(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    return [
        *(
            f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}"
            for table, name, definition in keys
        ),
        *(definition for _, definition in indexes),
    ]


def build(url: str, backend: str, rows: int, end: datetime, config: Path) -> float:
    """The warehouse at ``url`` migrated (by the measured tree's ``recordsync migrate``),
    filled and its summaries' deltas folded; the seconds it took."""
    started = time.monotonic()
    migrated = command_run(config, "migrate")
    if migrated.returncode != 0:
        raise RuntimeError(f"migrate exited {migrated.returncode}: {migrated.output[-2000:]}")
    engine = create_engine(url, poolclass=pool.NullPool)
    at: Any = end if backend != "sqlite" else end.strftime("%Y-%m-%dT%H:%M:%S")
    if backend == "mariadb":
        at = end.replace(tzinfo=None)
    try:
        with engine.begin() as conn:
            if backend == "mariadb":
                conn.exec_driver_sql("SET SESSION time_zone = '+00:00'")
            rebuild = _postgres_unindexed(conn) if backend == "postgres" else []
            conn.execute(text(_ROWS[backend](rows)), {"rows": rows, "end": at})
            conn.execute(text(_REVISIONS))
            for statement in rebuild:
                conn.exec_driver_sql(statement)
        with engine.connect() as conn:
            if backend == "postgres":
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                    "VACUUM ANALYZE records, record_revisions"
                )
            elif backend == "mariadb":
                conn.exec_driver_sql("ANALYZE TABLE records, record_revisions")
            else:
                conn.exec_driver_sql("ANALYZE")
    finally:
        engine.dispose()
    anchor = Warehouse.connect(url)
    try:
        anchor.state.start_rebuild(
            MERCHANT,
            change_cursor="scale-cursor",
            anchor_at=end,
            history_from=end - timedelta(days=DAYS),
            snapshot_to=end + timedelta(seconds=61),
            windows=[],
        )
        # The triggers left the load's deltas; a holder folds them within seconds of a page,
        # so the dashboards are timed on folded totals, as they read them in production.
        while anchor.summaries.fold(MERCHANT):
            pass
    finally:
        anchor.close()
    return time.monotonic() - started


def _day(backend: str, value: date) -> Any:
    return value.isoformat() if backend == "sqlite" else value


def dashboard_queries(backend: str, today: date) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each dashboard question: its SQL against the BI views, and its parameters."""
    month = _day(backend, today - timedelta(days=29))
    week = _day(backend, today - timedelta(days=6))
    ggr_per_day = (
        "SELECT day, currency, SUM(ggr_amount) FROM daily_game_summary "
        "WHERE merchant_id = :m AND day >= :since GROUP BY day, currency ORDER BY day"
    )
    top_games = (
        "SELECT game_id, SUM(ggr_amount) AS ggr FROM daily_game_summary "
        "WHERE merchant_id = :m AND day >= :since GROUP BY game_id ORDER BY ggr DESC LIMIT 10"
    )
    today_totals = (
        "SELECT currency, SUM(rounds), SUM(bet_amount), SUM(ggr_amount) "
        "FROM daily_game_summary WHERE merchant_id = :m AND day = :today GROUP BY currency"
    )
    player_month = (
        "SELECT * FROM daily_player_summary WHERE merchant_id = :m AND player_id = :p "
        "AND day >= :since ORDER BY day"
    )
    return {
        "GGR per UTC day, last 30 days": (ggr_per_day, {"m": MERCHANT, "since": month}),
        "top 10 games by GGR, last 7 days": (top_games, {"m": MERCHANT, "since": week}),
        "today's totals by currency": (
            today_totals,
            {"m": MERCHANT, "today": _day(backend, today)},
        ),
        "one player's month": (player_month, {"m": MERCHANT, "p": "player-4242", "since": month}),
    }


def median_ms(conn: Connection, sql: str, params: dict[str, Any]) -> float:
    conn.execute(text(sql), params).all()  # the warm-up
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        conn.execute(text(sql), params).all()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


# The tree whose commands are measured (``--tree``; None: this checkout): "before" figures
# come from a copy of the code before a change, run against the same warehouse.
TREE: list[Path | None] = [None]


def command_run(config: Path, *args: str) -> harness.ChildRun:
    """A whole command of the measured tree as a child process: its wall time, peak RSS and
    exit code."""
    env = harness.daemon_environment(TREE[0])
    command = [sys.executable, "-m", "recordsync", "--config", str(config), *args]
    return harness.run_child(command, env, timeout=3600, cwd=harness.tree_root(TREE[0]))


def sizes(conn: Connection, backend: str) -> dict[str, int]:
    """Bytes of each part: a table's rows (with TOAST), its indexes, and each index alone."""
    found: dict[str, int] = {}
    if backend == "postgres":
        for table in TABLES:
            found[f"{table}: table"] = int(
                conn.exec_driver_sql(f"SELECT pg_table_size('{table}')").scalar_one()
            )
            found[f"{table}: indexes"] = int(
                conn.exec_driver_sql(f"SELECT pg_indexes_size('{table}')").scalar_one()
            )
            for name, size in conn.exec_driver_sql(
                "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
                f"WHERE indrelid = '{table}'::regclass ORDER BY 1"
            ):
                found[f"  index {name}"] = int(size)
    elif backend == "mariadb":
        for table in TABLES:
            conn.exec_driver_sql(f"ANALYZE TABLE {table}").all()
            data, indexes = conn.exec_driver_sql(
                "SELECT data_length, index_length FROM information_schema.tables "
                f"WHERE table_schema = DATABASE() AND table_name = '{table}'"
            ).one()
            found[f"{table}: table (clustered on its key)"] = int(data)
            found[f"{table}: secondary indexes"] = int(indexes)
    return found


def timed_queries(report: harness.Report, url: str, backend: str, today: date) -> None:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            for name, (sql, params) in dashboard_queries(backend, today).items():
                took = median_ms(conn, sql, params)
                report.add(
                    name,
                    took,
                    "ms",
                    target=f"<= {QUERY_TARGET_MS:.0f}",
                    met=took <= QUERY_TARGET_MS,
                )
    finally:
        engine.dispose()


def bytes_report(report: harness.Report, url: str, backend: str, rows: int) -> None:
    """Bytes per round, whole and by part: what a year's growth costs on disk."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            parts = sizes(conn, backend)
    finally:
        engine.dispose()
    if not parts:
        return
    total = sum(size for name, size in parts.items() if not name.startswith("  "))
    report.add("bytes per round (records + history, with indexes)", total / rows, "B")
    for name, size in parts.items():
        report.add(f"  {name.strip()}", size / rows, "B")


def backfill_run(
    report: harness.Report, backend: str, sim: harness.SimProcess, url: str, label: str
) -> float:
    """A whole ``recordsync backfill`` of the simulator's history into ``url``; its records/s.
    On PostgreSQL the CPU of that database's backends is sampled (``harness.BackendCpu``)."""
    end = datetime.now(UTC)
    env = harness.daemon_environment(
        TREE[0],
        harness.environment_for(
            sim.base_url, url, RECORDSYNC_MERCHANT_ID=MERCHANT, RECORDSYNC_PAGE_SIZE="1000"
        ),
    )
    command = harness.backfill_command(end - timedelta(days=BACKFILL_DAYS, hours=1), end)
    cpu = harness.BackendCpu(url) if backend == "postgres" else None
    server = harness.server_cpu_seconds(backend)
    with cpu if cpu is not None else contextlib.nullcontext():
        run = harness.run_child(command, env, timeout=3600, cwd=harness.tree_root(TREE[0]))
    server = harness.server_cpu_seconds(backend) - server
    if run.returncode != 0:
        raise RuntimeError(f"backfill exited {run.returncode}:\n{run.output[-2000:]}")
    rate = sim.records / run.seconds
    report.add(f"backfill of {sim.records:,} into {label}: records/s", rate, "rec/s")
    report.add(f"  our CPU per record ({label})", run.cpu_seconds / sim.records * 1e6, "us")
    if cpu is not None:
        report.add(
            f"  PostgreSQL backends' CPU per record ({label})",
            cpu.seconds / sim.records * 1e6,
            "us",
        )
    elif backend != "sqlite":
        report.add(
            f"  whole server's CPU per record ({label}, shared)", server / sim.records * 1e6, "us"
        )
    return rate


def write_config(folder: Path, url: str, base_url: str, end: datetime) -> Path:
    config = folder / "scale.toml"
    history_from = (end - timedelta(days=DAYS)).isoformat()
    config.write_text(
        f'database_url = "{url}"\nmerchant_id = "{MERCHANT}"\nsecret = "{DEMO_SECRET}"\n'
        f'base_url = "{base_url}"\nhistory_from = "{history_from}"\n'
    )
    return config


def commands(report: harness.Report, config: Path, end: datetime, folder: Path) -> None:
    """The operator's commands as whole processes, each once warm, then once measured."""
    day = (harness.iso_ms(end - timedelta(days=1)), harness.iso_ms(end))
    month = (harness.iso_ms(end - timedelta(days=30)), harness.iso_ms(end))
    runs: list[tuple[str, tuple[str, ...], float | None]] = [
        ("report --days 7 --by game", ("report", "--days", "7", "--by", "game"), REPORT_TARGET_S),
        ("status", ("status",), STATUS_TARGET_S),
        (
            "backfill --dry-run, one day",
            ("backfill", "--dry-run", "--from", day[0], "--to", day[1]),
            None,
        ),
        (
            "verify --dry-run, 30 days",
            ("verify", "--dry-run", "--from", month[0], "--to", month[1]),
            None,
        ),
        ("merchant reset --dry-run (365 days)", ("merchant", "reset", MERCHANT, "--dry-run"), None),
        (
            "merchant state export",
            ("merchant", "state", MERCHANT, "export", str(folder / "state.json")),
            None,
        ),
        ("verify, one day", ("verify", "--from", day[0], "--to", day[1]), None),
    ]
    for name, command, target in runs:
        command_run(config, *command)  # the warm-up: the page cache, the files
        run = command_run(config, *command)
        if run.returncode not in {0, 1} or (run.returncode == 1 and not name.startswith("verify,")):
            report.note(f"{name} exited {run.returncode}: {run.output.strip()[-300:]}")
        verdict: dict[str, Any] = {}
        if target is not None:
            verdict = {"target": f"<= {target}", "met": run.seconds <= target}
        report.add(f"recordsync {name} (whole process)", run.seconds, "s", **verdict)
        report.add(f"  peak RSS of {name}", run.peak_rss_mb, "MB")


def main() -> int:
    args = harness.arguments(
        __doc__.splitlines()[0],
        [
            ("--backend", {"choices": harness.BACKENDS, "default": "postgres"}),
            ("--rows", {"type": int, "default": None}),
            ("--tree", {"type": Path, "default": None, "help": "measure that tree's commands"}),
        ],
    )
    backend: str = args.backend
    TREE[0] = args.tree
    rows = args.rows or (TINY_ROWS if args.size == "tiny" else FULL_ROWS[backend])
    rounds_per_day = BACKFILL_ROUNDS_PER_DAY[args.size]
    report = harness.Report(f"the warehouse at {rows:,} rounds, {backend}", args.size)
    report.header()
    end = datetime.now(UTC).replace(microsecond=0)
    with (
        tempfile.TemporaryDirectory() as folder,
        harness.database(backend, Path(folder)) as url,
        harness.sim_process(
            history_days=BACKFILL_DAYS,
            rounds_per_day=rounds_per_day,
            extra=("--merchant-id", MERCHANT),
        ) as sim,
    ):
        report.note(f"commands of {harness.tree_root(args.tree)}")
        config = write_config(Path(folder), url, sim.base_url, end)
        seconds = build(url, backend, rows, end, config)
        report.note(f"built {rows:,} rounds over {DAYS} days in {seconds:.0f} s")
        timed_queries(report, url, backend, end.date())
        bytes_report(report, url, backend, rows)
        commands(report, config, end, Path(folder))
        # The write path into this warehouse against an empty one, in the same minutes: an
        # empty one before and after (the machine is shared: the better is the figure), the big
        # one once between them (a second pass would only replay rows already there).
        empty_rates = []
        with harness.database(backend, Path(folder)) as empty:
            empty_rates.append(backfill_run(report, backend, sim, empty, "an empty warehouse"))
        big = backfill_run(report, backend, sim, url, f"{rows:,} rows")
        with harness.database(backend, Path(folder)) as empty:
            empty_rates.append(backfill_run(report, backend, sim, empty, "an empty warehouse"))
        ratio = big / max(empty_rates)
        report.add(
            "records/s into the big warehouse / into an empty one",
            ratio,
            "x",
            target=">= 0.9",
            met=ratio >= 0.9,
        )
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
