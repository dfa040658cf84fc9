"""The warehouse write path alone, and the SQLite session settings it was tuned with.

Pages of 1000 records are rendered by an in-process simulator and parsed once, up front; then
each variant commits them page by page into a fresh database and the cost per record is
printed.  No HTTP, no simulator CPU: only what one page's transaction costs.

- ``current``: one page per transaction through ``PageStore.commit_window_pages``, as the sync
  commits a page that finds the writer free;
- ``4`` and ``8 pages per transaction``: as the sync's group commits write pages that waited
  for a one-at-a-time writer (SQLite, MariaDB; ``sync/group_commit.py``);
- ``no revision history``: the same with ``keep_revisions=False`` (the share of the history);
- ``with the two retired indexes``: ``current`` with the indexes revision 0017 dropped built
  again (by update time, by game): the write path before that revision, in the same run;
- ``without the BI indexes``: ``current`` without the five secondary indexes of ``records``
  (the primary key stays), as a first load into an empty warehouse writes since W5
  (``warehouse/bi/indexes.py``; bench/README.md, 7); every other variant builds them first;
- SQLite page cache: the same warehouse on an engine whose connections then set another
  ``cache_size`` and ``wal_autocheckpoint``: the evidence for the defaults in
  ``warehouse/connection.py``.

On PostgreSQL the server's CPU is that of the benchmark database's own backends
(``harness.BackendCpu``): the server is shared with whatever else runs.

    .venv/bin/python bench/write_path.py [--size tiny|full] [--backends sqlite,postgres,...]
        [--variants NAME,...] [--repeats N]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import harness
from sqlalchemy import create_engine, event, pool, text

from recordsync.core.models import RecordsPage
from recordsync.core.state import Window, WindowPage
from recordsync.core.times import floor_ms
from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import Warehouse
from recordsync.warehouse.connection import create_warehouse_engine

SIZES: Final = {"tiny": (0.1, 50_000), "full": (2.0, 100_000)}  # history_days, rounds_per_day
MERCHANT: Final = "demo-merchant"
JOB: Final = "backfill:bench"
# Session settings tried on top of the warehouse's own (connection._configure_sqlite).
# Pages per transaction tried beside ``current`` (one): the sync's group commits.
GROUPS: Final = (4, 8)
SQLITE_VARIANTS: Final = {
    "2 MiB cache (SQLite's default)": ("cache_size = -2000", "wal_autocheckpoint = 1000"),
    "32 MiB cache": ("cache_size = -32768", "wal_autocheckpoint = 16384"),
    "64 MiB cache": ("cache_size = -65536", "wal_autocheckpoint = 16384"),
    "128 MiB cache": ("cache_size = -131072", "wal_autocheckpoint = 16384"),
}


def rendered_pages(history_days: float, rounds_per_day: int) -> list[RecordsPage]:
    config = SimConfig(
        history_days=history_days,
        rounds_per_day=rounds_per_day,
        record_requests=harness.LIFTED_RATE,
    )
    pages = []
    with Simulator(config) as sim:
        sim.start()
        client = harness.lifted_client(sim)
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


# Our process's CPU seconds of the last ``through_warehouse`` (the machine is shared: CPU per
# record is steadier than wall time, and it is what a replica pays).
LAST_CPU: list[float] = [0.0]


def through_warehouse(
    warehouse: Warehouse, pages: list[RecordsPage], group: int = 1, *, indexes: bool = True
) -> float:
    """Every page committed with its cursor, ``group`` pages per transaction (the sync's group
    commits, ``sync/group_commit.py``, when pages wait for a one-at-a-time writer).

    Without ``indexes`` the new job into an empty table leaves the BI indexes out, as a load
    the writer would bound does (``warehouse/bi/indexes.py``, ``sync/indexes.py``); with them
    the figures are those of a write path that keeps them up to date, as the tail's, a load
    the rate limit bounds and any load into a non-empty warehouse do."""
    warehouse.migrate()
    window = Window(datetime(2000, 1, 1, tzinfo=UTC), datetime(2000, 1, 2, tzinfo=UTC))
    warehouse.state.ensure_job(MERCHANT, JOB, [window], defer_bi_indexes=not indexes)
    staged = [
        WindowPage(
            JOB,
            window,
            records=page.records,
            rejected=page.rejected,
            next_cursor=f"cursor-{number}",
            cursor_issued_at=page.projection_as_of,
            done=False,
            position=str(number),
        )
        for number, page in enumerate(pages)
    ]
    cpu = time.process_time()
    started = time.perf_counter()
    for first in range(0, len(staged), group):
        warehouse.pages.commit_window_pages(MERCHANT, staged[first : first + group])
    seconds = time.perf_counter() - started
    LAST_CPU[0] = time.process_time() - cpu
    return seconds


RETIRED_INDEXES: Final = (
    ("ix_records_merchant_updated", "merchant_id, updated_at"),
    ("ix_records_merchant_game", "merchant_id, game_id, created_at"),
)


def with_retired_indexes(url: str, pages: list[RecordsPage]) -> float:
    """The warehouse as it was before revision 0017: two indexes more to keep up."""
    warehouse = Warehouse.connect(url)
    warehouse.migrate()
    with warehouse.engine.begin() as conn:
        for name, columns in RETIRED_INDEXES:
            conn.exec_driver_sql(f"CREATE INDEX {name} ON records ({columns})")
    return through_warehouse(warehouse, pages)


def without_bi_indexes(url: str, pages: list[RecordsPage]) -> float:
    """The job into an empty table leaves them out (W5, ``warehouse/bi/indexes.py``)."""
    warehouse = Warehouse.connect(url)
    return through_warehouse(warehouse, pages, indexes=False)


def with_pragmas(url: str, pragmas: tuple[str, ...]) -> Warehouse:
    engine = create_warehouse_engine(url)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    return Warehouse(engine)


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
        ("with the two retired indexes", with_retired_indexes),
        ("without the BI indexes", without_bi_indexes),
        *(
            (
                f"{group} pages per transaction",
                lambda url, pages, g=group: through_warehouse(Warehouse.connect(url), pages, g),
            )
            for group in GROUPS
        ),
    ]
    if backend == "sqlite":
        for label, pragmas in SQLITE_VARIANTS.items():
            found.append(
                (
                    label,
                    lambda url, pages, p=pragmas: through_warehouse(with_pragmas(url, p), pages),
                )
            )
    return found


def main() -> int:
    args = harness.arguments(
        __doc__.splitlines()[0],
        [
            ("--backends", {"default": ",".join(harness.BACKENDS)}),
            (
                "--mariadb-buffer-pool-mib",
                {"type": int, "default": 0, "help": "run MariaDB with this buffer pool"},
            ),
            ("--variants", {"default": "", "help": "only these variants (comma-separated)"}),
            ("--repeats", {"type": int, "default": 1, "help": "each variant this many times"}),
        ],
    )
    history_days, rounds_per_day = SIZES[args.size]
    report = harness.Report("warehouse write path alone (no HTTP)", args.size)
    report.header()
    pages = rendered_pages(history_days, rounds_per_day)
    count = sum(len(page.records) for page in pages)
    report.note(f"{count:,} records in {len(pages)} pages, committed one page per transaction")
    for backend in args.backends.split(","):
        sized = backend == "mariadb" and args.mariadb_buffer_pool_mib
        with harness.mariadb_buffer_pool(args.mariadb_buffer_pool_mib) if sized else nullcontext():
            if sized:
                report.note(f"mariadb with a {args.mariadb_buffer_pool_mib} MiB buffer pool")
            only = {name for name in args.variants.split(",") if name}
            for _ in range(args.repeats):
                _measure(report, backend, pages, count, only)
    return report.finish(check=args.check)


def _measure(
    report: harness.Report,
    backend: str,
    pages: list[RecordsPage],
    count: int,
    only: set[str],
) -> None:
    expected: tuple[int, int] | None = None
    for name, run in variants(backend):
        if only and name not in only:
            continue
        with fresh(backend) as url:
            backends = harness.BackendCpu(url) if backend == "postgres" else None
            server_cpu = harness.server_cpu_seconds(backend)
            with backends if backends is not None else nullcontext():
                seconds = run(url, pages)
            server_cpu = harness.server_cpu_seconds(backend) - server_cpu
            if backends is not None:
                server_cpu = backends.seconds
            stored = stored_rows(url)
        expected = expected or stored
        if stored[0] != expected[0] or (stored[1] not in {0, expected[1]}):
            report.note(f"{backend}, {name}: stored {stored}, current stores {expected}")
        report.add(f"{backend}, {name}: per record", seconds / count * 1e6, "us")
        report.add(f"  {backend}, {name}: our CPU per record", LAST_CPU[0] / count * 1e6, "us")
        if backend != "sqlite":
            server_us = server_cpu / count * 1e6
            report.add(f"  {backend}, {name}: server CPU per record", server_us, "us")
        report.add(f"  {backend}, {name}: records/s", count / seconds, "rec/s")


if __name__ == "__main__":
    raise SystemExit(main())
