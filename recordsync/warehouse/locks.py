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

The database locks live on a dedicated connection (``LockConnection``: autocommit, outside any
pool used for writes), built here from the warehouse engine's URL and kept open for the lock's
life; the fleet session (``fleet``) holds all of a process's merchant locks on one of them.  When
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
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import structlog
from sqlalchemy import Connection, Engine, create_engine, pool, text
from sqlalchemy.engine import URL

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.warehouse.connection import sqlite_file, translate_errors

MYSQL_LOCK_NAME_MAX: Final = 64
_CONNECT_TIMEOUT_S: Final = 10
_KEEPALIVE_COUNT: Final = 3
_KEEPALIVE_IDLE_MAX_S: Final = 10
_KEEPALIVE_INTERVAL_MAX_S: Final = 5

_T = TypeVar("_T")

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
        return FileLock(lock_file_path(path, merchant_id))
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


class FileLock:
    """``flock`` on a file beside the SQLite database; the kernel frees it when we die.

    The file says who holds it: ``owner`` (the fleet's replica id), else the process id.
    """

    def __init__(self, path: Path, *, owner: str | None = None) -> None:
        self.path = path
        self.resource = f"file {path}"
        self._owner = owner
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
        # Who holds it, for a person and for ``file_lock_owner``; the lock is what counts.
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{self._owner or os.getpid()}\n".encode(), 0)
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


def postgres_connect_args(lease_seconds: int) -> dict[str, object]:
    """Our side of a PostgreSQL lock connection: a query on a dead network fails within
    about ``lease_seconds`` instead of hanging (TCP keepalives, ``tcp_user_timeout``)."""
    idle, interval = _keepalive_timing(lease_seconds)
    return {
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": interval,
        "keepalives_count": _KEEPALIVE_COUNT,
        "tcp_user_timeout": lease_seconds * 1000,
    }


def postgres_session_settings(lease_seconds: int) -> list[str]:
    """The server's side: end the session of a holder that went silent (paused, partitioned),
    which frees every lock it held, after about ``lease_seconds``."""
    idle, interval = _keepalive_timing(lease_seconds)
    return [
        f"SET idle_session_timeout = '{lease_seconds}s'",
        f"SET tcp_keepalives_idle = {idle}",
        f"SET tcp_keepalives_interval = {interval}",
        f"SET tcp_keepalives_count = {_KEEPALIVE_COUNT}",
        f"SET tcp_user_timeout = {lease_seconds * 1000}",
        "SET statement_timeout = '10s'",
    ]


def mariadb_connect_args(lease_seconds: int) -> dict[str, object]:
    """Our side of a MariaDB lock connection: a query on a dead network fails in time."""
    return {"read_timeout": lease_seconds, "write_timeout": lease_seconds}


def mariadb_session_settings(lease_seconds: int) -> list[str]:
    """The server's side: end the session of a holder that went silent, freeing its locks."""
    return [f"SET SESSION wait_timeout = {lease_seconds}"]


def _keepalive_timing(lease_seconds: int) -> tuple[int, int]:
    """Keepalive idle and interval seconds: three probes fit in about ``lease_seconds``, and
    never slower than 10 s idle and 5 s apart (the values of a 60 s lease)."""
    idle = min(_KEEPALIVE_IDLE_MAX_S, max(1, lease_seconds // 2))
    interval = min(_KEEPALIVE_INTERVAL_MAX_S, max(1, lease_seconds // 6))
    return idle, interval


class LockConnection:
    """A dedicated autocommit connection that locks live on (no pool: it lives long).

    Built from the warehouse engine's URL with the silent-holder settings above.  When it is
    lost every lock on it is gone with it: ``WarehouseUnavailableError`` is raised, the
    connection is closed, and the next call connects afresh (holding nothing).  ``on_connect``
    runs on each new connection (the fleet session LISTENs there).
    """

    def __init__(
        self,
        url: URL,
        *,
        lease_seconds: int,
        on_connect: Callable[[Connection], None] | None = None,
    ) -> None:
        backend = url.get_backend_name()
        if backend == "postgresql":
            connect_args = postgres_connect_args(lease_seconds)
            self._settings = postgres_session_settings(lease_seconds)
        elif backend in MYSQL_FAMILY:
            connect_args = mariadb_connect_args(lease_seconds)
            self._settings = mariadb_session_settings(lease_seconds)
        else:
            raise ConfigurationError(f"no lock connection on a {backend!r} warehouse")
        self._engine: Engine = create_engine(
            url,
            poolclass=pool.NullPool,
            isolation_level="AUTOCOMMIT",
            connect_args={"connect_timeout": _CONNECT_TIMEOUT_S, **connect_args},
        )
        self._on_connect = on_connect
        self._conn: Connection | None = None

    @property
    def connected(self) -> bool:
        """Whether a connection is open (its locks may still be held); no I/O."""
        return self._conn is not None

    def connection(self) -> Connection:
        """The open connection, connecting first when there is none."""
        if self._conn is None:
            with translate_errors("lock connect"):
                conn = self._engine.connect()
            for setting in self._settings:
                _try_setting(conn, setting)
            self._conn = conn
            if self._on_connect is not None:
                self.run(self._on_connect, "lock connect")
        return self._conn

    def scalar(self, sql: str, action: str, **params: object) -> object:
        return self.run(lambda conn: conn.execute(text(sql), params).scalar(), action)

    def rows(self, sql: str, action: str, **params: object) -> list[tuple[Any, ...]]:
        return self.run(
            lambda conn: [tuple(row) for row in conn.execute(text(sql), params)], action
        )

    def run(self, work: Callable[[Connection], _T], action: str) -> _T:
        """``work(connection)``; a lost connection is closed and raised as unavailable."""
        conn = self.connection()
        try:
            with translate_errors(action):
                return work(conn)
        except WarehouseUnavailableError:
            self.close()  # every lock went with it; reconnect on the next call
            raise

    def close(self) -> None:
        """Close the connection, which frees every lock on it; safe twice."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - already broken: closing is all we wanted
                conn.invalidate()

    def dispose(self) -> None:
        """Close, and release the engine; safe twice."""
        self.close()
        self._engine.dispose()


def _try_setting(conn: Connection, sql: str) -> None:
    """A per-session setting that an older server may not know, which is fine."""
    try:
        conn.execute(text(sql))
    except Exception:  # noqa: BLE001 - an older server without this setting
        _log.debug("lease_session_setting_skipped", setting=sql.split("=", maxsplit=1)[0])


def file_lock_owner(path: Path) -> str | None:
    """What the holder of the lock file at ``path`` wrote there; None when nobody holds it.

    Probes with a shared lock taken and dropped at once (on a descriptor of its own, so a
    lock this process holds through another descriptor counts as held).  A holder trying to
    lock at that very instant fails once and tries again on its next poll.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 1024, 0).decode(errors="replace").strip() or None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class _ServerLock:
    """One merchant's lock on a ``LockConnection`` of its own."""

    resource: str

    def __init__(self, url: URL, *, lease_seconds: int) -> None:
        self._conn = LockConnection(url, lease_seconds=lease_seconds)
        self._held = False

    def _scalar(self, sql: str, action: str, **params: object) -> object:
        try:
            return self._conn.scalar(sql, action, **params)
        except WarehouseUnavailableError:
            self._held = False
            raise

    def _unlock(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        if self._held and self._conn.connected:
            try:
                self._unlock()
            except Exception:  # noqa: BLE001 - closing the session releases it anyway
                _log.debug("lease_unlock_failed", lease=self.resource)
        self._held = False
        self._conn.dispose()


class _PostgresLock(_ServerLock):
    def __init__(self, url: URL, key: int, *, lease_seconds: int) -> None:
        super().__init__(url, lease_seconds=lease_seconds)
        self._key = key
        self.resource = f"postgresql advisory lock {key} on {url.database}"

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
        super().__init__(url, lease_seconds=lease_seconds)
        self._name = name
        self.resource = f"mariadb lock {name!r}"

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
