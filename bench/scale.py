"""Benchmark 11, the warehouse at the size an operator has after a year (issue 36).

Builds an N-row warehouse quickly, in SQL on the server (``generate_series`` on PostgreSQL,
the sequence engine's ``seq_1_to_N`` on MariaDB, a recursive CTE on SQLite), at the schema
before the rollups (revision 0014): one merchant, N rounds spread evenly over 365 days up to
the build's own "now", 200 games, 50 000 players, two currencies, one revision each in
``record_revisions``, and a sync state.  Then times what dashboards and operators ask of it:

- the upgrade that brings the rollups (revision 0015: ``migrate``, then the build of every
  old day through ``SummaryStore.build_all``, the code path of a holder), timed;
- the dashboard queries before the upgrade and after it (each the median of 5 after one
  warm-up, through SQLAlchemy on one connection): GGR per UTC day over the last 30 days, the
  top 10 games by GGR over the last
  7 days, today's totals by currency (from ``daily_game_summary``), and one player's month
  (``daily_player_summary``);
- ``recordsync report --days 7 --by game`` and ``recordsync status`` as whole processes;
- ``recordsync backfill --dry-run`` of one day, a whole process;
- bytes per round: ``records`` and ``record_revisions`` with their indexes (PostgreSQL and
  MariaDB), over N.

The targets are issue 36's (<= 50 ms a dashboard query, <= 1.5 s ``report``, <= 1 s
``status``), judged at full size only.  Full size: 20 000 000 rows on PostgreSQL, 5 000 000
on MariaDB, 2 000 000 on SQLite; ``--rows`` sets another N; ``--keep URL`` is not offered:
the database is dropped afterwards, as every benchmark's is.

    .venv/bin/python bench/scale.py [--size tiny|full] [--check]
        [--backend postgres|mariadb|sqlite] [--rows N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import harness
from sqlalchemy import Connection, create_engine, pool, text

from recordsync.warehouse import Warehouse
from recordsync.warehouse.migrate import upgrade

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
# The revision before the rollups (0015): the warehouse is built there, then upgraded.
BEFORE_ROLLUPS: Final = "0014"
ROLLUP_TABLES: Final = ("daily_game_totals", "daily_player_totals", "summary_deltas")

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
            FROM generate_series(CAST(1 AS BIGINT), :rows) AS g
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


def build(url: str, backend: str, rows: int, end: datetime) -> float:
    """The warehouse at ``url`` migrated to the revision before the rollups and filled, as an
    operator's is before the upgrade; the seconds it took."""
    started = time.monotonic()
    warehouse = Warehouse.connect(url)
    try:
        upgrade(warehouse.engine, BEFORE_ROLLUPS)
    finally:
        warehouse.close()
    engine = create_engine(url, poolclass=pool.NullPool)
    at: Any = end if backend != "sqlite" else end.strftime("%Y-%m-%dT%H:%M:%S")
    if backend == "mariadb":
        at = end.replace(tzinfo=None)
    try:
        with engine.begin() as conn:
            if backend == "mariadb":
                conn.exec_driver_sql("SET SESSION time_zone = '+00:00'")
            conn.execute(text(_ROWS[backend](rows)), {"rows": rows, "end": at})
            conn.execute(text(_REVISIONS))
        with engine.connect() as conn:
            _analyze(conn, backend, ("records", "record_revisions"))
    finally:
        engine.dispose()
    anchor = Warehouse.connect(url)
    try:
        anchor.start_rebuild(
            MERCHANT,
            change_cursor="scale-cursor",
            anchor_at=end,
            history_from=end - timedelta(days=DAYS),
            snapshot_to=end + timedelta(seconds=61),
            windows=[],
        )
    finally:
        anchor.close()
    return time.monotonic() - started


def upgrade_to_rollups(url: str, backend: str) -> tuple[float, float, int]:
    """The upgrade as an operator runs it: ``migrate`` (the rollups' revision), then the
    holder's build of every old day, one transaction a day (``SummaryStore.build_all``);
    the seconds of each, and the days built."""
    warehouse = Warehouse.connect(url)
    try:
        started = time.monotonic()
        warehouse.migrate()
        migrated = time.monotonic() - started
        started = time.monotonic()
        days = warehouse.summaries.build_all(MERCHANT, on_day=lambda _progress: None)
        built = time.monotonic() - started
    finally:
        warehouse.close()
    engine = create_engine(url, poolclass=pool.NullPool)  # no statement timeout
    try:
        with engine.connect() as conn:
            _analyze(conn, backend, ROLLUP_TABLES)
    finally:
        engine.dispose()
    return migrated, built, days


def _analyze(conn: Connection, backend: str, tables: tuple[str, ...]) -> None:
    """Statistics for the planner, as autovacuum (or the operator) would have them."""
    if backend == "postgres":
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            f"VACUUM ANALYZE {', '.join(tables)}"
        )
    elif backend == "mariadb":
        conn.exec_driver_sql(f"ANALYZE TABLE {', '.join(tables)}")
    else:
        conn.exec_driver_sql("ANALYZE")


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


def command_seconds(config: Path, *args: str) -> tuple[float, int]:
    started = time.monotonic()
    done = subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "recordsync", "--config", str(config), *args],
        capture_output=True,
        check=False,
        cwd=harness.ROOT,
    )
    return time.monotonic() - started, done.returncode


def bytes_per_round(conn: Connection, backend: str, rows: int) -> float | None:
    if backend == "postgres":
        total = conn.exec_driver_sql(
            "SELECT pg_total_relation_size('records') + pg_total_relation_size('record_revisions')"
        ).scalar_one()
    elif backend == "mariadb":
        total = conn.exec_driver_sql(
            "SELECT SUM(data_length + index_length) FROM information_schema.tables "
            "WHERE table_schema = DATABASE() AND table_name IN ('records', 'record_revisions')"
        ).scalar_one()
    else:
        return None
    return float(total) / rows


def main() -> int:
    args = harness.arguments(
        __doc__.splitlines()[0],
        [
            ("--backend", {"choices": harness.BACKENDS, "default": "postgres"}),
            ("--rows", {"type": int, "default": None}),
        ],
    )
    backend: str = args.backend
    rows = args.rows or (TINY_ROWS if args.size == "tiny" else FULL_ROWS[backend])
    report = harness.Report(f"the warehouse at {rows:,} rounds, {backend}", args.size)
    report.header()
    end = datetime.now(UTC).replace(microsecond=0)
    today = end.date()
    with tempfile.TemporaryDirectory() as folder, harness.database(backend, Path(folder)) as url:
        seconds = build(url, backend, rows, end)
        report.note(f"built {rows:,} rounds over {DAYS} days in {seconds:.0f} s")
        engine = create_engine(url, poolclass=pool.NullPool)
        try:
            with engine.connect() as conn:
                before = {
                    name: median_ms(conn, sql, params)
                    for name, (sql, params) in dashboard_queries(backend, today).items()
                }
        finally:
            engine.dispose()
        migrated, built, days = upgrade_to_rollups(url, backend)
        report.add("migrate to the rollups' revision", migrated, "s")
        report.add(f"summaries built ({days} days, one transaction a day)", built, "s")
        for name, took in before.items():
            report.add(f"{name}, before the rollups", took, "ms")
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
                per_round = bytes_per_round(conn, backend, rows)
        finally:
            engine.dispose()
        if per_round is not None:
            report.add("bytes per round (records + history, with indexes)", per_round, "B")
        config = Path(folder) / "scale.toml"
        history_from = (end - timedelta(days=DAYS)).isoformat()
        config.write_text(
            f'database_url = "{url}"\nmerchant_id = "{MERCHANT}"\nsecret = "{"s" * 43}"\n'
            f'base_url = "http://127.0.0.1:9"\nhistory_from = "{history_from}"\n'
        )
        commands: list[tuple[str, tuple[str, ...], float]] = [
            ("recordsync report --days 7 --by game", ("report", "--days", "7"), REPORT_TARGET_S),
            ("recordsync status", ("status",), STATUS_TARGET_S),
        ]
        for name, command, target in commands:
            if command[0] == "report":
                command = (*command, "--by", "game")  # noqa: PLW2901 - the full command
            command_seconds(config, *command)  # the warm-up: the page cache, the files
            took, code = command_seconds(config, *command)
            if code != 0:
                report.note(f"{name} exited {code}")
            report.add(
                f"{name} (whole process)", took, "s", target=f"<= {target}", met=took <= target
            )
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
