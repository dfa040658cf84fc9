"""The warehouse write path alone, and prototypes of what would make it cheaper (evidence for
the change requests in bench/README.md; the warehouse itself is not changed here).

Pages of 1000 records are rendered by an in-process simulator and parsed once, up front; then
each variant commits them page by page into a fresh database and the cost per record is
printed.  No HTTP, no simulator CPU: only what one page's transaction costs.

- ``current``: ``Warehouse.commit_window_page``, exactly as the sync calls it;
- ``no revision history``: the same with ``keep_revisions=False`` (the share of the history);
- SQLite ``bigger cache``: the same warehouse on an engine whose connections also set
  ``cache_size`` (128 MiB, or 32 MiB) and ``wal_autocheckpoint`` (16384 pages): session
  settings only;
- PostgreSQL ``COPY``: rows (encoded by the warehouse's own encoders) are copied into
  temporary tables and merged with one ``INSERT ... SELECT ... ON CONFLICT`` per table, in one
  transaction per page, with the same revision guard;
- ``stage once`` (SQLite, PostgreSQL): a snapshot page's rows are encoded and sent once, into
  a temporary table, and both ``records`` (revision-guarded merge) and ``record_revisions``
  (its revisions, no sequence, as today) are written from it by ``INSERT ... SELECT``.

    .venv/bin/python bench/write_path.py [--size tiny|full] [--backends sqlite,postgres,...]
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import harness
import psycopg
from sqlalchemy import create_engine, event, pool, text
from sqlalchemy.engine import make_url

from recordsync.budget import RateBudget
from recordsync.client import PlatformClient
from recordsync.models import RecordsPage
from recordsync.signing import Secret
from recordsync.sim import SimConfig, Simulator
from recordsync.state import Window
from recordsync.times import floor_ms
from recordsync.warehouse import Warehouse
from recordsync.warehouse.connection import create_warehouse_engine
from recordsync.warehouse.revisions import COLUMNS as REVISION_COLUMNS
from recordsync.warehouse.revisions import compile_revision_insert, seen_revisions
from recordsync.warehouse.upsert import COLUMNS, collapse, compile_upsert

SIZES: Final = {"tiny": (0.1, 50_000), "full": (2.0, 100_000)}  # history_days, rounds_per_day
MERCHANT: Final = "demo-merchant"
JOB: Final = "backfill:bench"
SQLITE_PRAGMAS: Final = ("cache_size = -131072", "wal_autocheckpoint = 16384")  # 128 MiB
SQLITE_PRAGMAS_32: Final = ("cache_size = -32768", "wal_autocheckpoint = 16384")  # 32 MiB


def rendered_pages(history_days: float, rounds_per_day: int) -> list[RecordsPage]:
    config = SimConfig(
        history_days=history_days,
        rounds_per_day=rounds_per_day,
        record_requests=harness.LIFTED_RATE,
    )
    pages = []
    with Simulator(config) as sim:
        sim.start()
        client = PlatformClient(
            base_url=sim.base_url,
            merchant_id=config.merchant_id,
            secret=Secret(config.secret),
            budget=RateBudget(harness.LIFTED_RATE, 1),
        )
        end = floor_ms(sim.now())
        start = end - timedelta(days=history_days, hours=1)
        with client:
            window = start
            while window < end:
                window_end = min(window + timedelta(hours=24), end)
                cursor: str | None = None
                while True:
                    if cursor is None:
                        page = client.records_first(window, window_end, limit=1000)
                    else:
                        page = client.records_next(cursor, limit=1000)
                    pages.append(page)
                    if not page.has_more:
                        break
                    cursor = page.next_cursor
                window = window_end
    return pages


def through_warehouse(warehouse: Warehouse, pages: list[RecordsPage]) -> float:
    warehouse.migrate()
    window = Window(datetime(2000, 1, 1, tzinfo=UTC), datetime(2000, 1, 2, tzinfo=UTC))
    warehouse.ensure_job(MERCHANT, JOB, [window])
    started = time.perf_counter()
    for number, page in enumerate(pages):
        warehouse.commit_window_page(
            MERCHANT,
            JOB,
            window,
            records=page.records,
            rejected=page.rejected,
            next_cursor=f"cursor-{number}",
            cursor_issued_at=page.projection_as_of,
            done=False,
            position=str(number),
        )
    return time.perf_counter() - started


def with_pragmas(url: str, pragmas: tuple[str, ...] = SQLITE_PRAGMAS) -> Warehouse:
    engine = create_warehouse_engine(url)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    return Warehouse(engine)


def _history_from_stage(stage: str) -> str:
    """The snapshot page's revisions, straight from the staged rows (no second encoding):
    a snapshot revision has no sequence and no change time (revisions.py)."""
    selected = ", ".join(
        "NULL" if name in {"sequence", "changed_at"} else name for name in REVISION_COLUMNS
    )
    return (
        f"INSERT INTO record_revisions ({', '.join(REVISION_COLUMNS)}) "  # noqa: S608
        f"SELECT {selected} FROM {stage} WHERE true "
        "ON CONFLICT (merchant_id, record_id, revision) DO NOTHING"
    )


def _merge_records(stage: str) -> str:
    updated = [name for name in COLUMNS if name not in {"merchant_id", "record_id", "revision"}]
    return (
        f"INSERT INTO records ({', '.join(COLUMNS)}) SELECT {', '.join(COLUMNS)} "  # noqa: S608
        f"FROM {stage} WHERE true ON CONFLICT (merchant_id, record_id) DO UPDATE SET "
        + ", ".join(f"{name} = excluded.{name}" for name in [*updated, "revision"])
        + " WHERE records.revision < excluded.revision"
    )


def sqlite_staged(url: str, pages: list[RecordsPage], *, bigger_cache: bool = False) -> float:
    """Prototype: rows encoded once into a TEMP table (no index), then records and history
    are both written from it by INSERT ... SELECT, one transaction per page."""
    store = Warehouse.connect(url)
    store.migrate()
    dialect = store.engine.dialect
    store.close()
    upsert = compile_upsert(dialect)
    db = sqlite3.connect(make_url(url).database or "", isolation_level=None)
    pragmas = ("journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON")
    for pragma in pragmas + (SQLITE_PRAGMAS if bigger_cache else ()):
        db.execute(f"PRAGMA {pragma}")
    db.execute("CREATE TEMP TABLE stage AS SELECT * FROM records WHERE 0")
    fill = f"INSERT INTO stage ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"  # noqa: S608
    merge, history = _merge_records("stage"), _history_from_stage("stage")
    started = time.perf_counter()
    for number, page in enumerate(pages):
        now = datetime.now(UTC)
        db.execute("BEGIN IMMEDIATE")
        db.execute("DELETE FROM stage")
        db.executemany(fill, upsert.encode(MERCHANT, collapse(page.records), now))
        db.execute(merge)
        db.execute(history)
        db.execute(
            "UPDATE snapshot_windows SET cursor = ? WHERE merchant_id = ?", (str(number), MERCHANT)
        )
        db.execute("COMMIT")
    seconds = time.perf_counter() - started
    db.close()
    return seconds


def postgres_copy(url: str, pages: list[RecordsPage], *, history_from_stage: bool = False) -> float:
    """Prototype: COPY into temporary tables, one merge per table, one commit per page."""
    store = Warehouse.connect(url)
    store.migrate()
    dialect = store.engine.dialect
    store.close()
    upsert, revisions = compile_upsert(dialect), compile_revision_insert(dialect)
    updated = [name for name in COLUMNS if name not in {"merchant_id", "record_id", "revision"}]
    merge_records = (
        f"INSERT INTO records ({', '.join(COLUMNS)}) SELECT {', '.join(COLUMNS)} "  # noqa: S608
        "FROM stage_records ON CONFLICT (merchant_id, record_id) DO UPDATE SET "
        + ", ".join(f"{name} = excluded.{name}" for name in [*updated, "revision"])
        + " WHERE records.revision < excluded.revision"
    )
    merge_revisions = (
        f"INSERT INTO record_revisions ({', '.join(REVISION_COLUMNS)}) "  # noqa: S608
        f"SELECT {', '.join(REVISION_COLUMNS)} FROM stage_revisions "
        "ON CONFLICT (merchant_id, record_id, revision) DO UPDATE SET "
        "sequence = excluded.sequence, changed_at = excluded.changed_at "
        "WHERE record_revisions.sequence IS NULL AND excluded.sequence IS NOT NULL"
    )
    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain) as conn:
        conn.execute(
            "CREATE TEMP TABLE stage_records (LIKE records) ON COMMIT DELETE ROWS;"
            "CREATE TEMP TABLE stage_revisions (LIKE record_revisions) ON COMMIT DELETE ROWS"
        )
        conn.commit()
        started = time.perf_counter()
        for number, page in enumerate(pages):
            now = datetime.now(UTC)
            rows = collapse(page.records)
            with conn.transaction(), conn.cursor() as cursor:
                with cursor.copy(f"COPY stage_records ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                    for row in upsert.encode(MERCHANT, rows, now):
                        copy.write_row(row)
                cursor.execute(merge_records)
                if history_from_stage:
                    cursor.execute(_history_from_stage("stage_records"))
                else:
                    columns = ", ".join(REVISION_COLUMNS)
                    with cursor.copy(f"COPY stage_revisions ({columns}) FROM STDIN") as copy:
                        for row in revisions.encode(MERCHANT, seen_revisions(rows), now):
                            copy.write_row(row)
                    cursor.execute(merge_revisions)
                cursor.execute(
                    "UPDATE snapshot_windows SET cursor = %s WHERE merchant_id = %s",
                    (f"cursor-{number}", MERCHANT),
                )
        return time.perf_counter() - started


def stored_rows(url: str) -> tuple[int, int]:
    """(records, record_revisions) rows: every variant must store what ``current`` stores."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return (
                int(conn.execute(text("SELECT count(*) FROM records")).scalar_one()),
                int(conn.execute(text("SELECT count(*) FROM record_revisions")).scalar_one()),
            )
    finally:
        engine.dispose()


@contextmanager
def fresh(backend: str) -> Iterator[str]:
    with harness.database(backend) as url:
        yield url


def variants(backend: str) -> list[tuple[str, Callable[[str, list[RecordsPage]], float]]]:
    found: list[tuple[str, Callable[[str, list[RecordsPage]], float]]] = [
        ("current", lambda url, pages: through_warehouse(Warehouse.connect(url), pages)),
        (
            "no revision history",
            lambda url, pages: through_warehouse(
                Warehouse.connect(url, keep_revisions=False), pages
            ),
        ),
    ]
    if backend == "sqlite":
        found.append(
            ("bigger cache", lambda url, pages: through_warehouse(with_pragmas(url), pages))
        )
        found.append(
            (
                "32 MiB cache",
                lambda url, pages: through_warehouse(with_pragmas(url, SQLITE_PRAGMAS_32), pages),
            )
        )
        found.append(("stage once, records + history by SELECT", sqlite_staged))
        found.append(
            (
                "stage once + bigger cache",
                lambda url, pages: sqlite_staged(url, pages, bigger_cache=True),
            )
        )
    if backend == "postgres":
        found.append(("COPY + one merge per table", postgres_copy))
        found.append(
            (
                "COPY once, records + history by SELECT",
                lambda url, pages: postgres_copy(url, pages, history_from_stage=True),
            )
        )
    return found


def main() -> int:
    args = harness.arguments(
        __doc__.splitlines()[0], [("--backends", {"default": ",".join(harness.BACKENDS)})]
    )
    history_days, rounds_per_day = SIZES[args.size]
    report = harness.Report("warehouse write path alone (no HTTP)", args.size)
    report.header()
    pages = rendered_pages(history_days, rounds_per_day)
    count = sum(len(page.records) for page in pages)
    report.note(f"{count:,} records in {len(pages)} pages, committed one page per transaction")
    for backend in args.backends.split(","):
        expected: tuple[int, int] | None = None
        for name, run in variants(backend):
            with fresh(backend) as url:
                seconds = run(url, pages)
                stored = stored_rows(url)
            expected = expected or stored
            if stored[0] != expected[0] or (stored[1] not in {0, expected[1]}):
                report.note(f"{backend}, {name}: stored {stored}, current stores {expected}")
            report.add(f"{backend}, {name}: per record", seconds / count * 1e6, "us")
            report.add(f"  {backend}, {name}: records/s", count / seconds, "rec/s")
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
