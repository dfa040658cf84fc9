"""The schema upgrade runs under a database-wide lock (issue 30): processes started together
upgrade the warehouse once, the others wait a bounded time, say so, and find it current."""

from __future__ import annotations

import threading
import time

import pytest
from alembic import command
from sqlalchemy import inspect
from structlog.testing import capture_logs

from recordsync.core.errors import WarehouseUnavailableError
from recordsync.warehouse import Warehouse
from recordsync.warehouse.migrate import _config, current_revision, head_revision, upgrade
from recordsync.warehouse.schema_lock import schema_lock


def test_an_upgrade_waits_for_the_lock_then_finds_the_schema_current(warehouse_url):
    first, second = Warehouse.connect(warehouse_url), Warehouse.connect(warehouse_url)
    try:
        held, release = threading.Event(), threading.Event()

        def upgrade_slowly() -> None:
            with schema_lock(first.engine):
                held.set()
                release.wait(10)
                # The holder upgrades while it has the lock, as ``upgrade`` does inside it.
                config = _config()
                with first.engine.begin() as conn:
                    config.attributes["connection"] = conn
                    command.upgrade(config, "head")

        holder = threading.Thread(target=upgrade_slowly)
        holder.start()
        assert held.wait(30)
        with capture_logs() as logs:
            waiter = threading.Thread(target=second.migrate)
            waiter.start()
            # Until it says it waits: its first schema read loads the migration scripts, which
            # took more than a second on a loaded machine, and a fixed sleep then released the
            # holder before the waiter had asked for the lock (it found it free, said nothing).
            deadline = time.monotonic() + 30.0
            while not _said(logs, "schema_upgrade_waiting") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _said(logs, "schema_upgrade_waiting")
            time.sleep(0.6)  # more than a poll: it keeps waiting while the lock is held
            assert waiter.is_alive(), "the second upgrade waits for the lock"
            assert not _said(logs, "schema_lock_taken")
            release.set()
            waiter.join(30)
            holder.join(30)
        assert _said(logs, "schema_lock_taken")
        with second.engine.connect() as conn:
            assert current_revision(conn) == head_revision()
        assert "records" in inspect(second.engine).get_table_names()
    finally:
        first.close()
        second.close()


def _said(logs: list[dict[str, object]], event: str) -> bool:
    return any(entry["event"] == event for entry in list(logs))


def test_a_lock_held_beyond_the_wait_is_a_warehouse_outage_not_a_hang(warehouse_url):
    if warehouse_url.startswith("sqlite") and ":memory:" in warehouse_url:
        pytest.skip("an in-memory database has no other process to wait for")
    first, second = Warehouse.connect(warehouse_url), Warehouse.connect(warehouse_url)
    try:
        with schema_lock(first.engine):
            started = time.monotonic()
            with pytest.raises(WarehouseUnavailableError, match="schema lock"):
                upgrade(second.engine, lock_wait=1.0)
            assert 1.0 <= time.monotonic() - started < 5.0
        upgrade(second.engine, lock_wait=1.0)  # free again: it upgrades
        with second.engine.connect() as conn:
            assert current_revision(conn) == head_revision()
    finally:
        first.close()
        second.close()


def test_a_current_schema_takes_no_lock(warehouse_url):
    store = Warehouse.connect(warehouse_url)
    try:
        store.migrate()
        with schema_lock(store.engine):
            upgrade(store.engine, lock_wait=0.1)  # would time out if it asked for the lock
    finally:
        store.close()
