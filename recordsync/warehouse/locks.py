"""Per-merchant locks that the database or the operating system frees when their holder dies.

The service's lease (``recordsync.service.lease``) holds one of these, asked of
``Warehouse.merchant_lock``; no cleanup code of ours is needed to free it, so a crashed daemon
never blocks its own restart:

- PostgreSQL: a session advisory lock, ``pg_try_advisory_lock(key)`` with ``key`` a stable
  64-bit hash of ``"recordsync:" + merchant_id``.  Advisory locks are per database, so two
  warehouses on one server do not interfere.
- MariaDB: ``GET_LOCK('recordsync:<database>:<merchant>', 0)``.  Lock names are server-wide,
  hence the database in the name; names longer than 64 characters (MySQL's limit) are hashed.
- SQLite: an exclusive ``flock`` on ``<database file>.<merchant hash>.lock`` beside the
  database.  An in-memory database lives in one process: no lock is needed.

The database locks live on a dedicated connection (autocommit, outside any pool used for
writes), built here from the warehouse engine's URL and kept open for the lock's life.  When
that connection is lost (a database restart, a killed session, a network failure) the lock is
gone with it, and ``verify`` says so.

A holder whose host or network dies goes silent: the server ends its session, freeing the lock,
after about ``lease_seconds`` (PostgreSQL ``idle_session_timeout`` and TCP keepalives, MariaDB
``wait_timeout``).  On our side the same bound turns a heartbeat on a dead network into a
failure instead of a hang.

A lease row with an expiry would only be needed on a database with none of these locks.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path
from typing import Final, Protocol

import structlog
from sqlalchemy import Connection, Engine, create_engine, pool, text
from sqlalchemy.engine import URL

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.warehouse.connection import sqlite_file, translate_errors

MYSQL_LOCK_NAME_MAX: Final = 64
_CONNECT_TIMEOUT_S: Final = 10

_log = structlog.get_logger(__name__)


def lease_key(merchant_id: str) -> int:
    """The PostgreSQL advisory lock key: a stable signed 64-bit hash of the merchant."""
    digest = hashlib.sha256(f"recordsync:{merchant_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def mysql_lock_name(database: str, merchant_id: str) -> str:
    """``GET_LOCK`` name: readable when it fits in 64 characters, hashed otherwise."""
    name = f"recordsync:{database}:{merchant_id}"
    if len(name) <= MYSQL_LOCK_NAME_MAX:
        return name
    digest = hashlib.sha256(f"{database}:{merchant_id}".encode()).hexdigest()
    return ("recordsync:" + digest)[:MYSQL_LOCK_NAME_MAX]


def lock_file_path(database: str | os.PathLike[str], merchant_id: str) -> Path:
    """``<database file>.<merchant hash>.lock``: beside the data, one per merchant."""
    digest = hashlib.sha256(merchant_id.encode()).hexdigest()[:16]
    return Path(f"{os.path.abspath(database)}.{digest}.lock")  # noqa: PTH100 - keeps symlinks


class MerchantLock(Protocol):
    """One merchant's lock on one backend; its user (the lease) serialises the calls."""

    resource: str  # what is locked, for logs (never a password)

    def try_acquire(self) -> bool:
        """True when now held; False when another holder has it.  May raise
        ``WarehouseUnavailableError``, after which it can be tried again."""
        ...

    def verify(self) -> bool:
        """Is the lock still ours?  False (or an exception) means lost."""
        ...

    def release(self) -> None:
        """Give the lock back if held and close everything; safe twice."""
        ...


def merchant_lock(url: URL, merchant_id: str, *, lease_seconds: int) -> MerchantLock:
    """The lock for ``merchant_id`` in the warehouse at ``url`` (its engine's); not yet taken.

    ``lease_seconds`` bounds how long a silent holder keeps a server lock (see above).
    """
    backend = url.get_backend_name()
    if backend == "sqlite":
        path = sqlite_file(url)
        if path is None:
            return _NoLock()
        return _FileLock(lock_file_path(path, merchant_id))
    if backend == "postgresql":
        return _PostgresLock(url, lease_key(merchant_id), lease_seconds=lease_seconds)
    if backend in MYSQL_FAMILY:
        name = mysql_lock_name(url.database or "", merchant_id)
        return _MariaDbLock(url, name, lease_seconds=lease_seconds)
    raise ConfigurationError(f"lease: unsupported warehouse database {backend!r}")


class _NoLock:
    """In-memory SQLite: the database dies with the process, so does any contention."""

    resource = "in-memory sqlite (no lock needed)"

    def try_acquire(self) -> bool:
        return True

    def verify(self) -> bool:
        return True

    def release(self) -> None:
        pass


class _FileLock:
    """``flock`` on a file beside the SQLite database; the kernel frees it when we die."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.resource = f"file {path}"
        self._fd: int | None = None
        self._held = False

    def try_acquire(self) -> bool:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise ConfigurationError(
                    f"lease: cannot open the lock file {self.path}: {exc.strerror}"
                ) from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._held = True
        # For the person wondering who holds it; the lock, not the content, is what counts.
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        return True

    def verify(self) -> bool:
        """Still the file at ``path``: a deleted or replaced lock file locks nobody out."""
        if self._fd is None or not self._held:
            return False
        try:
            on_disk = self.path.stat()
        except FileNotFoundError:
            return False
        ours = os.fstat(self._fd)
        return (on_disk.st_dev, on_disk.st_ino) == (ours.st_dev, ours.st_ino)

    def release(self) -> None:
        fd, self._fd, self._held = self._fd, None, False
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the flock


class _ServerLock:
    """A lock on a dedicated autocommit connection of its own (no pool: it lives long)."""

    resource: str

    def __init__(self, url: URL, *, connect_args: dict[str, object]) -> None:
        self._engine: Engine = create_engine(
            url,
            poolclass=pool.NullPool,
            isolation_level="AUTOCOMMIT",
            connect_args={"connect_timeout": _CONNECT_TIMEOUT_S, **connect_args},
        )
        self._conn: Connection | None = None
        self._held = False

    def _session_settings(self, conn: Connection) -> None:
        """Per-session settings; each may be unknown to an old server, which is fine."""

    def _connection(self) -> Connection:
        if self._conn is None:
            with translate_errors("lease connect"):
                conn = self._engine.connect()
            self._session_settings(conn)
            self._conn = conn
        return self._conn

    def _scalar(self, sql: str, action: str, **params: object) -> object:
        conn = self._connection()
        try:
            with translate_errors(action):
                return conn.execute(text(sql), params).scalar()
        except WarehouseUnavailableError:
            self._close()  # reconnect on the next try
            raise

    def _try_setting(self, conn: Connection, sql: str) -> None:
        try:
            conn.execute(text(sql))
        except Exception:  # noqa: BLE001 - an older server without this setting
            _log.debug("lease_session_setting_skipped", setting=sql.split("=", maxsplit=1)[0])

    def _close(self) -> None:
        conn, self._conn, self._held = self._conn, None, False
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - already broken: closing is all we wanted
                conn.invalidate()

    def _unlock(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        if self._held and self._conn is not None:
            try:
                self._unlock()
            except Exception:  # noqa: BLE001 - closing the session releases it anyway
                _log.debug("lease_unlock_failed", lease=self.resource)
        self._close()
        self._engine.dispose()


class _PostgresLock(_ServerLock):
    def __init__(self, url: URL, key: int, *, lease_seconds: int) -> None:
        super().__init__(
            url,
            connect_args={
                # Our side: a heartbeat on a dead network fails instead of hanging.
                "keepalives": 1,
                "keepalives_idle": 10,
                "keepalives_interval": 5,
                "keepalives_count": 3,
                "tcp_user_timeout": lease_seconds * 1000,
            },
        )
        self._key = key
        self._lease_seconds = lease_seconds
        self.resource = f"postgresql advisory lock {key} on {url.database}"

    def _session_settings(self, conn: Connection) -> None:
        # The server's side: end the session of a holder that went silent, freeing the lock.
        seconds = self._lease_seconds
        self._try_setting(conn, f"SET idle_session_timeout = '{seconds}s'")
        self._try_setting(conn, "SET tcp_keepalives_idle = 10")
        self._try_setting(conn, "SET tcp_keepalives_interval = 5")
        self._try_setting(conn, "SET tcp_keepalives_count = 3")
        self._try_setting(conn, f"SET tcp_user_timeout = {seconds * 1000}")
        self._try_setting(conn, "SET statement_timeout = '10s'")

    def try_acquire(self) -> bool:
        got = self._scalar("SELECT pg_try_advisory_lock(:key)", "lease", key=self._key)
        self._held = bool(got)
        return self._held

    def verify(self) -> bool:
        if not self._held:
            return False
        # A bigint key is stored as classid (high 32 bits), objid (low 32 bits), objsubid 1.
        count = self._scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND pid = pg_backend_pid() AND objsubid = 1"
            " AND classid::bigint = :high AND objid::bigint = :low",
            "lease heartbeat",
            high=(self._key >> 32) & 0xFFFFFFFF,
            low=self._key & 0xFFFFFFFF,
        )
        return bool(count)

    def _unlock(self) -> None:
        self._scalar("SELECT pg_advisory_unlock(:key)", "lease release", key=self._key)


class _MariaDbLock(_ServerLock):
    def __init__(self, url: URL, name: str, *, lease_seconds: int) -> None:
        super().__init__(
            url,
            # Our side: a heartbeat on a dead network fails instead of hanging.
            connect_args={"read_timeout": lease_seconds, "write_timeout": lease_seconds},
        )
        self._name = name
        self._lease_seconds = lease_seconds
        self.resource = f"mariadb lock {name!r}"

    def _session_settings(self, conn: Connection) -> None:
        # The server's side: end the session of a holder that went silent, freeing the lock.
        self._try_setting(conn, f"SET SESSION wait_timeout = {self._lease_seconds}")

    def try_acquire(self) -> bool:
        got = self._scalar("SELECT GET_LOCK(:name, 0)", "lease", name=self._name)
        self._held = got == 1
        return self._held

    def verify(self) -> bool:
        if not self._held:
            return False
        ours = self._scalar(
            "SELECT IS_USED_LOCK(:name) = CONNECTION_ID()", "lease heartbeat", name=self._name
        )
        return ours == 1

    def _unlock(self) -> None:
        self._scalar("SELECT RELEASE_LOCK(:name)", "lease release", name=self._name)
