"""One active instance per merchant and warehouse, on SQLite, PostgreSQL and MariaDB.

The takeover test runs two real processes (``lease_holder.py``) and SIGKILLs the holder: the
lock must be freed by the database or the kernel, not by any cleanup code of ours.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dbfixtures import SERVER_PARAMS
from sqlalchemy import create_engine, create_mock_engine, pool, text
from sqlalchemy.engine import make_url
from structlog.testing import capture_logs

from recordsync.core.errors import ConfigurationError, ShutdownRequestedError
from recordsync.service.lease import acquire_lease
from recordsync.warehouse import Warehouse
from recordsync.warehouse.locks import (
    MYSQL_LOCK_NAME_MAX,
    lease_key,
    lock_file_path,
    mysql_lock_name,
)

HELPER = Path(__file__).with_name("lease_holder.py")
REPO = Path(__file__).resolve().parents[2]
FAST = {"poll": 0.05, "heartbeat": 0.1}


def no_wait(seconds):
    raise AssertionError(f"acquire_lease waited ({seconds} s) although the lease was free")


@pytest.fixture
def store(warehouse_url):
    """The warehouse on ``warehouse_url`` that leases are asked of (a lease needs no tables)."""
    warehouse = Warehouse.connect(warehouse_url)
    try:
        yield warehouse
    finally:
        warehouse.close()


class Holder:
    """``lease_holder.py`` in its own process; its stdout lines are collected by a thread."""

    def __init__(self, url, merchant_id, *extra):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(  # noqa: S603 - our own helper, trusted arguments
            [sys.executable, str(HELPER), url, merchant_id, *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines = queue.SimpleQueue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, predicate, timeout):
        """The first line (already seen or new) matching ``predicate`` within ``timeout``."""
        for line in self.seen:
            if predicate(line):
                return line
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(line)
            if predicate(line):
                return line
        return None

    def kill(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.process.stdout.close()


def is_held(line):
    return line == "HELD"


def is_waiting(line):
    try:
        return json.loads(line).get("event") == "lease_waiting"
    except ValueError:
        return False


def test_a_standby_takes_over_within_seconds_when_the_holder_is_killed(warehouse_url):
    first = Holder(warehouse_url, "merchant-1")
    second = None
    try:
        assert first.wait_for(is_held, 20), first.seen
        second = Holder(warehouse_url, "merchant-1")
        waiting = second.wait_for(is_waiting, 20)
        assert waiting, second.seen
        assert json.loads(waiting)["merchant_id"] == "merchant-1"
        # It keeps standing by (polling every 0.1 s) while the first one lives.
        assert second.wait_for(is_held, 1.0) is None, second.seen

        first.kill()
        killed_at = time.monotonic()
        assert second.wait_for(is_held, 10), second.seen
        assert time.monotonic() - killed_at < 5
    finally:
        first.kill()
        if second is not None:
            second.kill()


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_the_server_frees_the_lease_of_a_frozen_holder(warehouse_url):
    """SIGSTOP: the holder's sockets stay open, but its session goes silent; the server ends
    it after ``lease_seconds`` (PostgreSQL idle_session_timeout, MariaDB wait_timeout)."""
    first = Holder(warehouse_url, "merchant-1", "2")
    second = None
    try:
        assert first.wait_for(is_held, 20), first.seen
        second = Holder(warehouse_url, "merchant-1", "2")
        assert second.wait_for(is_waiting, 20), second.seen
        first.process.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        assert second.wait_for(is_held, 10), second.seen
        assert 1.5 < time.monotonic() - frozen_at < 5
    finally:
        first.kill()
        if second is not None:
            second.kill()


def test_different_merchants_do_not_block_each_other(warehouse_url):
    engine = create_engine(warehouse_url)
    warehouse = Warehouse(engine)
    try:
        one = acquire_lease(warehouse, "merchant-a", sleep=no_wait, **FAST)
        other = acquire_lease(warehouse, "merchant-b", sleep=no_wait, **FAST)
        with one, other:
            assert one.held
            assert other.held
            # The lease has a connection of its own, never one of the writers' pool.
            assert engine.pool.checkedout() == 0
    finally:
        engine.dispose()


def test_released_lease_is_free_again_and_release_is_idempotent(store):
    lease = acquire_lease(store, "merchant-1", sleep=no_wait, **FAST)
    with capture_logs() as logs:
        lease.release()
        lease.release()
    assert not lease.held
    assert [entry["event"] for entry in logs] == ["lease_released"]
    again = acquire_lease(store, "merchant-1", sleep=no_wait, **FAST)
    again.release()


def test_shutdown_while_waiting_propagates_and_leaves_the_holder_alone(store):
    holder = acquire_lease(store, "merchant-1", sleep=no_wait, **FAST)
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise ShutdownRequestedError("stop requested")

    try:
        with capture_logs() as logs, pytest.raises(ShutdownRequestedError):
            acquire_lease(store, "merchant-1", sleep=sleep, log_every=0, **FAST)
        assert sleeps == [0.05, 0.05, 0.05]
        waiting = [entry for entry in logs if entry["event"] == "lease_waiting"]
        assert len(waiting) == 3
        assert waiting[0]["merchant_id"] == "merchant-1"
        assert waiting[0]["log_level"] == "info"
        assert holder.held
    finally:
        holder.release()
    # The cancelled standby kept nothing: the lease is free at once.
    acquire_lease(store, "merchant-1", sleep=no_wait, **FAST).release()


def test_waiting_is_logged_periodically_not_on_every_poll(store):
    holder = acquire_lease(store, "merchant-1", sleep=no_wait, **FAST)
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds
        if now[0] >= 10:
            raise ShutdownRequestedError("stop requested")

    try:
        with capture_logs() as logs, pytest.raises(ShutdownRequestedError):
            acquire_lease(
                store,
                "merchant-1",
                sleep=sleep,
                clock=lambda: now[0],
                poll=1.0,
                heartbeat=1.0,
                log_every=4.0,
            )
    finally:
        holder.release()
    waited = [entry["waited"] for entry in logs if entry["event"] == "lease_waiting"]
    assert waited == [0.0, 4.0, 8.0]


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_a_lost_lease_connection_turns_held_false(warehouse_url, store):
    lost = threading.Event()
    lease = acquire_lease(store, "merchant-1", sleep=no_wait, on_lost=lost.set, **FAST)
    admin = create_engine(warehouse_url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn, capture_logs() as logs:
            if admin.dialect.name == "postgresql":
                killed = conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_locks "
                        "WHERE locktype = 'advisory' AND database = "
                        "(SELECT oid FROM pg_database WHERE datname = current_database())"
                    )
                ).all()
                assert killed == [(True,)]
            else:
                name = mysql_lock_name(make_url(warehouse_url).database, "merchant-1")
                holder = conn.execute(text("SELECT IS_USED_LOCK(:n)"), {"n": name}).scalar()
                conn.execute(text(f"KILL {int(holder)}"))
            assert lost.wait(5)
        assert not lease.held
        assert [entry["event"] for entry in logs] == ["lease_lost"]
        # The daemon acquires again; the lock went with the dead session.
        acquire_lease(store, "merchant-1", sleep=no_wait, **FAST).release()
    finally:
        lease.release()
        admin.dispose()


def test_a_deleted_sqlite_lock_file_counts_as_lost(tmp_path):
    database = tmp_path / "warehouse.db"
    lost = threading.Event()
    warehouse = Warehouse.connect(f"sqlite:///{database}")
    lease = acquire_lease(warehouse, "m", sleep=no_wait, on_lost=lost.set, **FAST)
    try:
        lock_file = lock_file_path(database, "m")
        assert lock_file.read_text() == f"{os.getpid()}\n"
        lock_file.unlink()  # a new process would now lock a new file: we cannot claim it
        assert lost.wait(5)
        assert not lease.held
    finally:
        lease.release()


@pytest.mark.parametrize(
    "url",
    ["sqlite://", "sqlite:///:memory:", "sqlite:///file:db?mode=memory&cache=shared&uri=true"],
    ids=["default", "memory-name", "memory-uri"],
)
def test_in_memory_sqlite_needs_no_lock(url):
    warehouse = Warehouse.connect(url)
    first = acquire_lease(warehouse, "m", sleep=no_wait, **FAST)
    second = acquire_lease(warehouse, "m", sleep=no_wait, **FAST)
    assert first.held
    assert second.held
    first.release()
    second.release()


def test_lock_file_lies_beside_the_database_one_per_merchant(tmp_path):
    database = tmp_path / "warehouse.db"
    one, other = lock_file_path(database, "m-1"), lock_file_path(database, "m-2")
    assert one.parent == tmp_path
    assert one.name.startswith("warehouse.db.")
    assert one.name.endswith(".lock")
    assert one != other


def test_sqlite_lock_file_follows_a_uri_filename(tmp_path):
    database = tmp_path / "warehouse.db"
    warehouse = Warehouse.connect(f"sqlite:///file:{database}?mode=rwc&uri=true")
    lease = acquire_lease(warehouse, "m", sleep=no_wait, **FAST)
    try:
        assert lock_file_path(database, "m").exists()
    finally:
        lease.release()


def test_advisory_lock_key_is_a_stable_signed_64_bit_hash():
    key = lease_key("merchant-1")
    assert key == lease_key("merchant-1")
    assert key != lease_key("merchant-2")
    assert -(2**63) <= key < 2**63
    assert lease_key("m") == -1922362245805105698  # known answer: must never change


@pytest.mark.parametrize(
    ("database", "merchant_id", "expected"),
    [
        ("rs_1", "merchant-1", "recordsync:rs_1:merchant-1"),
        ("warehouse", "m" * 80, None),
    ],
    ids=["readable", "long-is-hashed"],
)
def test_mysql_lock_names_fit_in_64_characters(database, merchant_id, expected):
    name = mysql_lock_name(database, merchant_id)
    assert len(name) <= MYSQL_LOCK_NAME_MAX
    assert name.startswith("recordsync:")
    if expected is not None:
        assert name == expected
    assert name != mysql_lock_name(database, merchant_id + "x")
    assert name != mysql_lock_name(database + "x", merchant_id)


@pytest.mark.parametrize(
    ("kwargs", "url"),
    [
        ({"poll": 30.0}, "sqlite://"),
        ({"heartbeat": 0.0}, "sqlite://"),
        ({}, "oracle://scott@db/x"),
    ],
    ids=["poll-too-slow", "no-heartbeat", "unsupported-database"],
)
def test_bad_lease_settings_are_configuration_errors(kwargs, url):
    # A mock engine has Oracle's dialect without Oracle's driver; the Warehouse the lease is
    # asked of refuses an unsupported database itself.
    engine = create_mock_engine(url, executor=None)
    with pytest.raises(ConfigurationError):
        acquire_lease(Warehouse(engine), "m", sleep=no_wait, **kwargs)


@pytest.mark.parametrize(
    "url",
    ["postgresql+psycopg://postgres@127.0.0.1:1/x", "mysql+pymysql://root@127.0.0.1:1/x"],
    ids=["postgres", "mariadb"],
)
def test_an_unreachable_warehouse_is_waited_for_not_a_crash(url):
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise ShutdownRequestedError("stop requested")

    with capture_logs() as logs, pytest.raises(ShutdownRequestedError):
        acquire_lease(Warehouse.connect(url), "m", sleep=sleep, log_every=0, **FAST)
    unavailable = [entry for entry in logs if entry["event"] == "lease_unavailable"]
    assert len(unavailable) == 2
    assert unavailable[0]["log_level"] == "warning"
    assert "warehouse unavailable" in unavailable[0]["error"]
