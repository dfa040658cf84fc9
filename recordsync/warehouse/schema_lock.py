"""The database-wide lock a schema upgrade runs under: one process upgrades, the others wait.

Replicas of a new Deployment start in the same second, a ``recordsync migrate`` Job may run
beside them, and every one of them finds the warehouse empty or behind: upgraded side by side,
Alembic's version row and DDL raced (on PostgreSQL a duplicate ``pg_type`` entry for its
version table, on MariaDB "expected to match one row") and some of them exited 1.
So the upgrade takes a lock the database or the kernel frees when its holder dies:

- PostgreSQL: a session advisory lock on its own connection (``SCHEMA_KEY``);
- MariaDB: ``GET_LOCK('recordsync-schema:<database>')`` (server-wide names, hence the database);
- SQLite: ``flock`` on ``<database file>.schema.lock``; an in-memory database needs none.

The key and the name are apart from every merchant's (``locks.lease_key`` hashes
``recordsync:<merchant>``; merchant lock names start ``recordsync:``).  A process that finds
the lock taken says so once (``schema_upgrade_waiting``), polls every ``POLL_SECONDS`` and,
once it has the lock, reads the schema's revision again: usually the other one brought it
to the head and there is nothing left to do.  It waits at most ``wait`` seconds, then raises
``WarehouseUnavailableError`` (a daemon tries again later; a command says so in one line).

The lock lives as long as its session, and that session sits idle while the revisions run on
another: on MariaDB the DDL sessions' ``wait_timeout`` (300 s) once closed it mid-upgrade and
another session got the lock while the upgrade still ran.  So the lock's session
has no idle limit of the server's (MariaDB ``wait_timeout`` at its maximum, PostgreSQL
``idle_session_timeout`` off; it is never inside a transaction, so no idle-in-transaction
limit applies), and ``SchemaLock.check()``, called before every revision, raises
``SchemaLockLostError`` once the lock is not this session's any more (its connection killed,
its server restarted): the upgrade stops before its next revision.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import structlog
from sqlalchemy import Connection, Engine, text

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.core.errors import SchemaLockLostError, WarehouseUnavailableError
from recordsync.warehouse.connection import sqlite_file, translate_errors
from recordsync.warehouse.lease.backends.sqlite import FileLock

# Long enough for the longest revision to finish elsewhere (0008 rebuilds MariaDB's two big
# tables: minutes for millions of rows); a wait beyond it is tried again by the caller.
DEFAULT_WAIT_SECONDS: Final = 900.0
POLL_SECONDS: Final = 0.5
SCHEMA_KEY: Final = int.from_bytes(
    hashlib.sha256(b"recordsync-schema").digest()[:8], "big", signed=True
)

# MariaDB's largest wait_timeout (a year): the lock's session is never closed as idle.
_MARIADB_NO_IDLE_LIMIT: Final = 31_536_000

# PostgreSQL 14 brought idle_session_timeout (a server default could close an idle session).
_POSTGRES_IDLE_SESSION_TIMEOUT_SINCE: Final = 140000

_log = structlog.get_logger(__name__)


class SchemaLock:
    """The schema lock held for the block; ``check()`` before each revision."""

    def __init__(self, held: Callable[[], bool] | None = None, resource: str = "") -> None:
        self._held = held
        self.resource = resource

    def check(self) -> None:
        """Raise ``SchemaLockLostError`` unless the lock is still ours (a file lock or no
        lock cannot be lost while this process lives)."""
        if self._held is None:
            return
        try:
            held = self._held()
        except Exception as exc:
            # The driver's class only: its message spans lines and quotes the SQL.
            cause = type(getattr(exc, "orig", None) or exc).__name__
            raise SchemaLockLostError(_lost(self.resource, f"its session failed: {cause}")) from exc
        if not held:
            raise SchemaLockLostError(_lost(self.resource, "another session may hold it"))


def _lost(resource: str, why: str) -> str:
    return (
        f"the schema lock ({resource}) was lost during the upgrade ({why}): stopped before "
        "the next revision; run `recordsync migrate` again once no other migration runs"
    )


@contextmanager
def schema_lock(
    engine: Engine,
    *,
    wait: float = DEFAULT_WAIT_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[SchemaLock]:
    """Hold the warehouse's schema lock for the block (see the module docstring)."""
    backend = engine.dialect.name
    if backend == "sqlite":
        path = sqlite_file(engine.url)
        if path is None:
            yield SchemaLock()  # in memory: this process is the only one
            return
        lock = FileLock(Path(f"{os.path.abspath(path)}.schema.lock"))  # noqa: PTH100
        try:
            _take(lock.try_acquire, lock.resource, wait=wait, sleep=sleep, clock=clock)
            yield SchemaLock(resource=lock.resource)
        finally:
            lock.release()
        return
    with translate_errors("schema lock"):
        conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        with translate_errors("schema lock"):
            server = _ServerLock(conn, backend)
            _take(server.try_take, server.resource, wait=wait, sleep=sleep, clock=clock)
        try:
            yield SchemaLock(server.held, server.resource)
        finally:
            try:
                server.give_back()
            except Exception:  # noqa: BLE001 - a broken connection: its lock is gone with it
                conn.invalidate()
    finally:
        conn.close()


class _ServerLock:
    """The schema lock on ``conn``, a connection of its own in autocommit."""

    def __init__(self, conn: Connection, backend: str) -> None:
        self._conn = conn
        if backend in MYSQL_FAMILY:
            database = conn.exec_driver_sql("SELECT DATABASE()").scalar_one()
            name = f"recordsync-schema:{database}"[:64]
            self._take_sql, self._give_sql = "SELECT GET_LOCK(:id, 0)", "SELECT RELEASE_LOCK(:id)"
            self._held_sql = "SELECT IS_USED_LOCK(:id) = CONNECTION_ID()"
            self._params: dict[str, object] = {"id": name}
            self._held_params = self._params
            self.resource = f"mariadb lock {name}"
            conn.exec_driver_sql(f"SET SESSION wait_timeout = {_MARIADB_NO_IDLE_LIMIT}")
        else:
            self._take_sql = "SELECT pg_try_advisory_lock(:id)"
            self._give_sql = "SELECT pg_advisory_unlock(:id)"
            # A bigint advisory key shows in pg_locks as its high and low 32 bits.
            self._held_sql = (
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND pid = pg_backend_pid() AND classid = :high AND objid = :low"
                " AND objsubid = 1"
            )
            unsigned = SCHEMA_KEY % 2**64
            self._params = {"id": SCHEMA_KEY}
            self._held_params = {"high": unsigned >> 32, "low": unsigned & 0xFFFFFFFF}
            self.resource = "postgresql advisory lock (schema)"
            version = int(conn.exec_driver_sql("SHOW server_version_num").scalar_one())
            if version >= _POSTGRES_IDLE_SESSION_TIMEOUT_SINCE:
                conn.exec_driver_sql("SET idle_session_timeout = 0")

    def try_take(self) -> bool:
        return self._conn.execute(text(self._take_sql), self._params).scalar() == 1

    def held(self) -> bool:
        """Whether this session still holds the lock (a killed session raises)."""
        return bool(self._conn.execute(text(self._held_sql), self._held_params).scalar())

    def give_back(self) -> None:
        self._conn.execute(text(self._give_sql), self._params)


def _take(
    try_take: Callable[[], bool],
    resource: str,
    *,
    wait: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> None:
    started = clock()
    said = False
    while not try_take():
        waited = clock() - started
        if waited >= wait:
            raise WarehouseUnavailableError(
                f"warehouse unavailable (schema upgrade): another process has held the "
                f"schema lock ({resource}) for more than {wait:.0f} s"
            )
        if not said:
            _log.info(
                "schema_upgrade_waiting",
                lock=resource,
                action="another process upgrades the schema: waiting for it, then checking",
                wait_at_most=wait,
            )
            said = True
        sleep(POLL_SECONDS)
    if said:
        _log.info("schema_lock_taken", lock=resource, waited=round(clock() - started, 3))
