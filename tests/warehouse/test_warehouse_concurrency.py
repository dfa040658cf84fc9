"""Pages committed side by side (PostgreSQL) still end with the highest revision of each record."""

from __future__ import annotations

import random
import threading
from dataclasses import replace
from datetime import timedelta

from sqlalchemy import text
from warehouse.warehouse_samples import MERCHANT, T0, make_record

from recordsync.core.models import Record
from recordsync.core.state import Window
from recordsync.warehouse import Warehouse

JOB = "backfill:concurrency"
WRITERS = 4
PAGES = 12
IDS = [f"rec-{number:03d}" for number in range(60)]


def test_only_postgres_takes_commits_side_by_side(warehouse: Warehouse) -> None:
    assert warehouse.concurrent_writes == (warehouse.engine.dialect.name == "postgresql")


def test_overlapping_pages_from_several_threads_keep_the_highest_revisions(
    warehouse: Warehouse,
) -> None:
    """Every writer upserts overlapping records in its own shuffled order and revisions; a
    deadlock or a lost update would fail the commit or leave a lower revision stored."""
    windows = [
        Window(T0 + timedelta(days=day), T0 + timedelta(days=day + 1)) for day in range(WRITERS)
    ]
    warehouse.ensure_job(MERCHANT, JOB, windows)
    base = {record_id: make_record(record_id) for record_id in IDS}
    errors: list[BaseException] = []
    highest: dict[str, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(WRITERS)

    def writer(number: int) -> None:
        rng = random.Random(number)
        try:
            start.wait()
            for page in range(PAGES):
                chosen = rng.sample(IDS, 25)
                records: list[Record] = [
                    replace(base[record_id], revision=rng.randint(1, 1000)) for record_id in chosen
                ]
                with lock:
                    for record in records:
                        highest[record.record_id] = max(
                            highest.get(record.record_id, 0), record.revision
                        )
                warehouse.commit_window_page(
                    MERCHANT,
                    JOB,
                    windows[number],
                    records=records,
                    rejected=[],
                    next_cursor=f"c-{page}",
                    cursor_issued_at=T0,
                    done=page == PAGES - 1,
                    position=str(page),
                )
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    with warehouse.engine.connect() as conn:
        rows = conn.execute(text("SELECT record_id, revision FROM records"))
        stored = {row.record_id: row.revision for row in rows}
        history = conn.execute(text("SELECT COUNT(*) FROM record_revisions")).scalar_one()
    assert stored == highest
    assert history >= len(highest)
