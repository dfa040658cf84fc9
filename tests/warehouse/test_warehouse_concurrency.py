"""Pages committed side by side (PostgreSQL, MariaDB) still end with the highest revision of
each record, and a page that loses a deadlock is run again rather than failed."""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

import pytest
from msgspec.structs import replace
from sqlalchemy import Connection, text
from structlog.testing import capture_logs
from support.dbfixtures import SERVER_PARAMS
from support.pages import commit_window_page
from support.warehouse_samples import MERCHANT, T0, WINDOW, make_record

from recordsync.core.errors import LeaseSupersededError
from recordsync.core.models import Record
from recordsync.core.state import Window
from recordsync.warehouse import Warehouse

JOB = "backfill:concurrency"
WRITERS = 4
PAGES = 12
IDS = [f"rec-{number:03d}" for number in range(600)]
PER_PAGE = 60


def test_the_servers_take_commits_side_by_side_and_sqlite_one_at_a_time(
    warehouse: Warehouse,
) -> None:
    assert warehouse.pages.concurrent_writes == (warehouse.engine.dialect.name != "sqlite")


def test_overlapping_pages_from_several_threads_keep_the_highest_revisions(
    warehouse: Warehouse,
) -> None:
    """Every writer upserts overlapping records in its own shuffled order and revisions, new
    keys between stored ones (where InnoDB's gap locks meet); a deadlock that surfaced or a
    lost update would fail the commit or leave a lower revision stored."""
    windows = [
        Window(T0 + timedelta(days=day), T0 + timedelta(days=day + 1)) for day in range(WRITERS)
    ]
    warehouse.state.ensure_job(MERCHANT, JOB, [*windows, WINDOW])
    base = {record_id: make_record(record_id) for record_id in IDS}
    stored_first = [base[record_id] for record_id in IDS[::3]]
    commit_window_page(warehouse,
        MERCHANT, JOB, WINDOW, records=stored_first, rejected=[], next_cursor=None,
        cursor_issued_at=T0, done=True, position="0",
    )  # fmt: skip
    errors: list[BaseException] = []
    highest: dict[str, int] = {record.record_id: record.revision for record in stored_first}
    lock = threading.Lock()
    start = threading.Barrier(WRITERS)

    def writer(number: int) -> None:
        rng = random.Random(number)
        try:
            start.wait()
            for page in range(PAGES):
                chosen = rng.sample(IDS, PER_PAGE)
                records: list[Record] = [
                    replace(base[record_id], revision=rng.randint(1, 1000)) for record_id in chosen
                ]
                with lock:
                    for record in records:
                        highest[record.record_id] = max(
                            highest.get(record.record_id, 0), record.revision
                        )
                commit_window_page(
                    warehouse,
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


FILLER = [f"rec-f{number:03d}" for number in range(200)]
HOLD = "UPDATE records SET status = 'HELD' WHERE merchant_id = 'merchant-1' AND record_id"
# A statement of this test's database still running after 0.2 s: the page, waiting for a row
# lock (information_schema.innodb_trx does not list a waiting INSERT on MariaDB 10.11).
LOCK_WAIT = {
    "mysql": (
        "SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() "
        "AND info LIKE 'INSERT INTO records%' AND time_ms > 200"
    ),
    "postgresql": (
        "SELECT COUNT(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ),
}


WINDOW_1 = Window(T0, T0 + timedelta(days=1))
SEED = [make_record(record_id) for record_id in ["rec-a", "rec-b", *FILLER]]
PAGE = [make_record("rec-a", revision=5), make_record("rec-b", revision=5)]


def _deadlocked_page(
    warehouse: Warehouse, last_statement: str, epoch: int | None = None
) -> tuple[BaseException | None, list[int]]:
    """Another transaction holds rec-b, the page (rec-a then rec-b) locks rec-a and waits for
    rec-b, then the other runs ``last_statement``, which waits for something the page holds:
    a real deadlock, which the server breaks by rolling the page back (the other transaction
    has changed far more rows).  What the page's commit raised (None: it committed) and the
    attempts logged as retried."""
    warehouse.state.ensure_job(MERCHANT, JOB, [WINDOW_1])
    commit_window_page(warehouse,
        MERCHANT, JOB, WINDOW_1, records=SEED, rejected=[], next_cursor="c-0",
        cursor_issued_at=T0, done=False, position="0",
    )  # fmt: skip
    outcome: list[BaseException | None] = []

    def commit_page() -> None:
        try:
            commit_window_page(warehouse,
                MERCHANT, JOB, WINDOW_1, records=PAGE, rejected=[], next_cursor="c-1",
                cursor_issued_at=T0, done=False, position="1", epoch=epoch,
            )  # fmt: skip
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            outcome.append(error)

    # READ COMMITTED: on MariaDB, where ``records`` is clustered by row_id, the LIKE below may
    # scan the whole table, and under REPEATABLE READ that locks the gap at its end as well,
    # where the page's new row would go: the page would wait before taking rec-a, no deadlock.
    other = warehouse.engine.connect().execution_options(isolation_level="READ COMMITTED")
    watcher = warehouse.engine.connect()
    page_thread = threading.Thread(target=commit_page)
    with capture_logs() as logs:
        try:
            with other.begin():
                other.execute(text(f"{HOLD} LIKE 'rec-f%'"))  # far more rows than the page's
                other.execute(text(f"{HOLD} = 'rec-b'"))
                page_thread.start()
                _wait_for_a_lock_wait(watcher, LOCK_WAIT[warehouse.engine.dialect.name])
                # Blocks until the server has broken the deadlock by rolling the page back.
                other.execute(text(last_statement))
        finally:
            page_thread.join(timeout=30)
            other.close()
            watcher.close()
    (raised,) = outcome
    return raised, [entry["attempt"] for entry in logs if entry["event"] == "page_commit_retried"]


def _revisions_and_statuses(warehouse: Warehouse) -> dict[str, tuple[int, str]]:
    stored = warehouse.records.fetch_records(MERCHANT)
    return {key: (stored[key]["revision"], stored[key]["status"]) for key in ("rec-a", "rec-b")}


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_a_page_that_loses_a_deadlock_is_committed_on_its_next_attempt(
    warehouse: Warehouse,
) -> None:
    """The page must then commit whole on its next attempt, once, with its cursor."""
    raised, retried = _deadlocked_page(warehouse, f"{HOLD} = 'rec-a'")

    assert (raised, retried) == (None, [1])
    assert _revisions_and_statuses(warehouse) == {"rec-a": (5, "OPEN"), "rec-b": (5, "OPEN")}
    (progress,) = warehouse.state.load_windows(MERCHANT, JOB)
    assert (progress.cursor, progress.records) == ("c-1", len(SEED) + len(PAGE))


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_a_retried_page_is_fenced_again_and_refused_once_superseded(
    warehouse: Warehouse,
) -> None:
    """The other transaction is a new holder raising the merchant's epoch, which waits for the
    page's shared lock on the lease: the page's next attempt checks the epoch again, and is
    refused with nothing of it stored."""
    session = warehouse.fleet_session("replica-a")
    try:
        epoch = session.try_hold(MERCHANT)
        assert epoch is not None
        raised, retried = _deadlocked_page(
            warehouse,
            "UPDATE merchant_leases SET epoch = epoch + 1 WHERE merchant_id = 'merchant-1'",
            epoch=epoch,
        )
    finally:
        session.close()

    assert isinstance(raised, LeaseSupersededError)
    assert (raised.expected, raised.found, retried) == (epoch, epoch + 1, [1])
    assert _revisions_and_statuses(warehouse) == {"rec-a": (1, "OPEN"), "rec-b": (1, "HELD")}
    (progress,) = warehouse.state.load_windows(MERCHANT, JOB)
    assert (progress.cursor, progress.records) == ("c-0", len(SEED))


def _wait_for_a_lock_wait(conn: Connection, query: str) -> None:
    """Until a transaction of this test's database waits for a row lock (the page's)."""
    deadline = time.monotonic() + 10
    while conn.execute(text(query)).scalar_one() == 0:
        conn.rollback()  # a fresh snapshot of the server's state each time
        assert time.monotonic() < deadline, "the page never waited for the held row"
        time.sleep(0.01)
