"""The lock primitives of the fleet's merchant locks (``fleet_locks``), which the database or
the operating system frees when their holder dies, so a crashed replica never blocks a
takeover and no cleanup code of ours is needed:

- PostgreSQL: session advisory locks, ``pg_try_advisory_lock(key)`` with ``key`` a stable
  64-bit hash of ``"recordsync:" + merchant_id`` (``lease_key``).  Advisory locks are per
  database, so two warehouses on one server do not interfere.
- MariaDB: ``GET_LOCK('recordsync:<database>:<merchant>', 0)`` (``mysql_lock_name``).  Lock
  names are server-wide, hence the database in the name; names longer than 64 characters
  (MySQL's limit) are hashed.
- SQLite: an exclusive ``flock`` on a file beside the database (``FileLock``).

The keys and names never change: a replica of an older version (one merchant per process,
before the fleet) took the same ones, so it and a fleet replica never sync one merchant at
once during an upgrade.

The database locks live on a dedicated connection (``LockConnection``: autocommit, outside any
pool used for writes), built from the warehouse engine's URL and kept open for the locks'
life; the fleet session holds all of a process's merchant locks on one of them.  When that
connection is lost (a database restart, a killed session, a network failure) the locks are
gone with it, and the next call says so.

A holder whose host or network dies goes silent: the server ends its session, freeing the lock,
after about ``lease_seconds`` (PostgreSQL ``idle_session_timeout`` and TCP keepalives, MariaDB
``wait_timeout``).  On our side the same bound turns a heartbeat on a dead network into a
failure instead of a hang.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import structlog
from sqlalchemy import Connection, Engine, create_engine, pool, text
from sqlalchemy.engine import URL

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.warehouse.connection import translate_errors

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
