"""Rows and the cursor that covers them commit together; a lost server is "wait and retry".

Failures are injected through SQLAlchemy's public event API on the warehouse's own engine (a
``before_cursor_execute`` listener), or by really killing the server session mid-transaction:
the code under test is never patched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, event, text
from support.dbfixtures import SERVER_PARAMS, server_url
from support.pages import commit_window_page
from support.warehouse_reads import fetch_revisions
from support.warehouse_samples import MERCHANT, T0, make_record, windows

from recordsync.core.errors import WarehouseUnavailableError
from recordsync.core.state import REBUILD_JOB, Phase, TailPage
from recordsync.warehouse import Warehouse
from recordsync.warehouse.connection import WRITE_OPTION


class InjectedFailureError(Exception):
    pass


@contextmanager
def before_statement(store: Warehouse, prefix: str, action: Callable[[object], None]):
    """Run ``action(dbapi_cursor)`` just before the first statement starting with ``prefix``."""
    fired = []

    def listener(_conn, cursor, statement, *_rest):
        if not fired and statement.lstrip().upper().startswith(prefix.upper()):
            fired.append(statement)
            action(cursor)

    event.listen(store.engine, "before_cursor_execute", listener)
    try:
        yield fired
    finally:
        event.remove(store.engine, "before_cursor_execute", listener)
    assert fired, f"no statement started with {prefix!r}"


def fail(_cursor: object) -> None:
    raise InjectedFailureError


@pytest.fixture
def snapshotting(warehouse: Warehouse) -> Iterator[Warehouse]:
    plan = windows(2)
    warehouse.state.start_rebuild(
        MERCHANT,
        change_cursor="tail-0",
        anchor_at=T0,
        history_from=plan[0].start,
        snapshot_to=plan[-1].end,
        windows=plan,
    )
    return warehouse


def commit_window(store: Warehouse, index: int = 0, *, done: bool = False):
    plan = windows(2)
    return commit_window_page(
        store,
        MERCHANT,
        REBUILD_JOB,
        plan[index],
        records=[make_record("a"), make_record("b")],
        rejected=[],
        next_cursor=None if done else "window-cursor-1",
        cursor_issued_at=T0,
        done=done,
        position="start",
    )


def commit_tail(store: Warehouse):
    return store.pages.commit_tail_page(
        MERCHANT,
        TailPage(
            records=[make_record("a", 4)],
            rejected=[],
            next_cursor="tail-1",
            last_sequence="99",
            projection_as_of=T0,
            position="tail-0",
        ),
    )


def snapshot(store: Warehouse):
    """Everything a commit may touch, to compare before and after a failed one."""
    return (
        store.records.fetch_records(MERCHANT),
        fetch_revisions(store, MERCHANT),
        store.state.load_state(MERCHANT),
        store.state.load_windows(MERCHANT, REBUILD_JOB),
    )


@pytest.mark.parametrize(
    ("commit", "failing_statement"),
    [
        (commit_window, "UPDATE snapshot_windows"),
        (commit_tail, "UPDATE sync_state"),
        (commit_window, "INSERT INTO records"),
        (commit_window, "INSERT INTO record_revisions"),
        (commit_tail, "INSERT INTO record_revisions"),
    ],
    ids=[
        "window-cursor-update",
        "tail-cursor-update",
        "row-upsert",
        "window-revisions",
        "tail-revisions",
    ],
)
def test_a_failure_mid_commit_leaves_neither_rows_nor_cursor(
    snapshotting, commit, failing_statement
):
    before = snapshot(snapshotting)
    with (
        before_statement(snapshotting, failing_statement, fail),
        pytest.raises(InjectedFailureError),
    ):
        commit(snapshotting)
    assert snapshot(snapshotting) == before
    commit(snapshotting)  # the same page again, now that the failure is gone
    assert set(snapshotting.records.fetch_records(MERCHANT)) == {"a", "b"} or commit is commit_tail


def test_a_failure_while_finishing_the_rebuild_keeps_the_last_window_open(snapshotting):
    commit_window(snapshotting, 1, done=True)
    before = snapshot(snapshotting)
    with (
        before_statement(snapshotting, "UPDATE sync_state", fail),
        pytest.raises(InjectedFailureError),
    ):
        commit_window(snapshotting, 0, done=True)
    assert snapshot(snapshotting) == before
    assert snapshotting.state.load_state(MERCHANT).phase is Phase.SNAPSHOT
    commit_window(snapshotting, 0, done=True)
    assert snapshotting.state.load_state(MERCHANT).phase is Phase.TAILING


def kill_session(store: Warehouse) -> Callable[[object], None]:
    """An action that makes the server drop the session the cursor belongs to."""
    backend = store.engine.dialect.name
    if backend == "postgresql":
        admin_url, sql = server_url("postgres"), "SELECT pg_terminate_backend({}, 5000)"
    elif backend in {"mysql", "mariadb"}:
        admin_url, sql = server_url("mariadb"), "KILL CONNECTION {}"
    else:
        raise AssertionError(f"no server session to lose on {backend}")

    def kill(cursor) -> None:
        connection = cursor.connection
        session = connection.info.backend_pid if backend == "postgresql" else connection.thread_id()
        admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(sql.format(int(session))))
        finally:
            admin.dispose()

    return kill


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
@pytest.mark.parametrize(
    ("commit", "statement"),
    [(commit_window, "UPDATE snapshot_windows"), (commit_tail, "UPDATE sync_state")],
    ids=["window", "tail"],
)
def test_a_server_lost_mid_commit_is_unavailable_writes_nothing_and_recovers(
    snapshotting, commit, statement
):
    kill = kill_session(snapshotting)
    before = snapshot(snapshotting)
    with (
        before_statement(snapshotting, statement, kill),
        pytest.raises(WarehouseUnavailableError, match="warehouse unavailable") as raised,
    ):
        commit(snapshotting)
    assert raised.value.__cause__ is not None
    assert snapshot(snapshotting) == before
    commit(snapshotting)  # pool_pre_ping replaced the dead connection
    assert snapshot(snapshotting) != before


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2",
        "mysql+pymysql://root@127.0.0.1:1/test?connect_timeout=2",
        "sqlite:////nonexistent-directory/for/recordsync.db",
    ],
    ids=["postgres", "mariadb", "sqlite"],
)
def test_an_unreachable_warehouse_is_reported_as_unavailable(url):
    store = Warehouse.connect(url)
    try:
        with pytest.raises(WarehouseUnavailableError, match="ping"):
            store.ping()
        with pytest.raises(WarehouseUnavailableError, match="load state"):
            store.state.load_state(MERCHANT)
    finally:
        store.close()
        store.close()


def test_sqlite_readers_are_not_blocked_by_an_open_write(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    daemon, reader = Warehouse.connect(url), Warehouse.connect(url)
    try:
        daemon.migrate()
        with daemon.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
        writer = daemon.engine.execution_options(**{WRITE_OPTION: True})
        with writer.begin() as conn:  # holds the write lock until the block ends
            conn.execute(text("DELETE FROM records"))
            assert reader.records.status(MERCHANT).records == 0
            assert reader.state.load_state(MERCHANT) is None
    finally:
        daemon.close()
        reader.close()
