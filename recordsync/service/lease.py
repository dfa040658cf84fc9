"""One active instance per merchant and warehouse.

Two daemons on the same merchant and warehouse would spend the platform's shared rate budget
twice (spec: Limits, "Record rate" is per merchant).  So the daemon first takes a lease; a
second copy waits as a standby (logging ``lease_waiting``) and takes over when the first dies.

The lease is a lock that the database or the operating system releases by itself when its
holder dies, so a crashed daemon never blocks its own restart:

- PostgreSQL: a session advisory lock, ``pg_try_advisory_lock(key)`` with ``key`` a stable
  64-bit hash of ``"recordsync:" + merchant_id``.  Advisory locks are per database, so two
  warehouses on one server do not interfere.
- MariaDB: ``GET_LOCK('recordsync:<database>:<merchant>', 0)``.  Lock names are server-wide,
  hence the database in the name; names longer than 64 characters (MySQL's limit) are hashed.
- SQLite: an exclusive ``flock`` on ``<database file>.<merchant hash>.lock`` beside the
  database.  An in-memory database lives in one process: no lock is needed.

The database locks live on a dedicated connection (autocommit, outside any pool used for
writes) kept open for the lease's life.  A heartbeat thread checks every ``heartbeat``
seconds that the lock is still ours; ``Lease.held`` only reads the result, so the daemon may
ask between every page.  When the connection is lost (a database restart, a killed session,
a network failure) the lock is gone with it: ``held`` turns False for good, ``on_lost`` is
called, and the daemon must stop taking pages and acquire a new lease.

How fast a standby takes over:

- the holder process dies (crash, SIGKILL, OOM): its sockets close, the server ends the
  session and frees the lock at once; the standby holds it within ``poll`` seconds;
- the holder's host or network dies: the server notices an idle, silent session after about
  ``lease_seconds`` (PostgreSQL ``idle_session_timeout`` and TCP keepalives, MariaDB
  ``wait_timeout``; the heartbeat keeps a live holder's session busy).  The holder's own
  heartbeat fails in about the same time; for a short overlap both may write, which the
  warehouse's revision guard makes harmless (only the budget is spent twice for that while).

A lease row with an expiry would only be needed on a database with none of these locks.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, Protocol, Self
from urllib.parse import unquote, urlsplit

import structlog
from sqlalchemy import Connection, Engine, create_engine, pool, text
from sqlalchemy.engine import URL

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.warehouse.connection import translate_errors, warehouse_url

DEFAULT_POLL: Final = 5.0
DEFAULT_HEARTBEAT: Final = 5.0
DEFAULT_LEASE_SECONDS: Final = 60
DEFAULT_LOG_EVERY: Final = 60.0
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


class _Lock(Protocol):
    """One backend's lock; calls are serialised by the ``Lease`` (or the acquiring loop)."""

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


class Lease:
    """A held lease: ``held`` while it lasts, ``release()`` to give it back (idempotent)."""

    def __init__(
        self,
        lock: _Lock,
        merchant_id: str,
        *,
        heartbeat: float = DEFAULT_HEARTBEAT,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.merchant_id = merchant_id
        self.resource = lock.resource
        self._lock = lock
        self._io = threading.Lock()  # one user of the lock's connection at a time
        self._done = threading.Event()  # released or lost: the heartbeat ends
        self._lost = threading.Event()
        self._on_lost = on_lost
        self._heartbeat = heartbeat
        self._thread = threading.Thread(target=self._beat, name=f"lease-{merchant_id}", daemon=True)
        self._thread.start()

    @property
    def held(self) -> bool:
        """True until released or lost; reads a flag, no I/O."""
        return not self._done.is_set()

    def release(self) -> None:
        """Give the lease back; safe to call twice and after the lease was lost."""
        released = not self._done.is_set()
        self._done.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._io:
            self._lock.release()
        if released and not self._lost.is_set():
            _log.info("lease_released", merchant_id=self.merchant_id, lease=self.resource)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease(merchant_id={self.merchant_id!r}, resource={self.resource!r})"

    def _beat(self) -> None:
        while not self._done.wait(self._heartbeat):
            with self._io:
                if self._done.is_set():
                    return
                try:
                    still_ours = self._lock.verify()
                    error = None
                except Exception as exc:  # noqa: BLE001 - any failure: the lock is gone
                    still_ours, error = False, f"{type(exc).__name__}: {exc}"
                if still_ours:
                    continue
                self._lost.set()
                self._done.set()
                self._lock.release()  # the connection is unusable; close it
            _log.error(
                "lease_lost",
                merchant_id=self.merchant_id,
                lease=self.resource,
                error=error,
                action="stop taking pages and acquire the lease again",
            )
            if self._on_lost is not None:
                self._on_lost()
            return


def acquire_lease(
    warehouse: str | URL | Engine,
    merchant_id: str,
    *,
    sleep: Callable[[float], None],
    poll: float = DEFAULT_POLL,
    heartbeat: float = DEFAULT_HEARTBEAT,
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    log_every: float = DEFAULT_LOG_EVERY,
    on_lost: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Lease:
    """Block until this process holds the lease for ``merchant_id`` on ``warehouse``.

    ``sleep`` is the stopper's: a shutdown while waiting raises ``ShutdownRequestedError``,
    which propagates after the waiting connection is closed (nothing was held).  A warehouse
    that does not answer is waited for like a lease held elsewhere (``lease_unavailable``).
    """
    if not merchant_id:
        raise ConfigurationError("merchant_id must not be empty")
    if not 0 < heartbeat < lease_seconds / 3 or not 0 < poll < lease_seconds / 3:
        raise ConfigurationError(
            "lease: heartbeat and poll must be positive and below a third of lease_seconds"
        )
    lock = _lock_for(warehouse, merchant_id, lease_seconds=lease_seconds)
    log = _log.bind(merchant_id=merchant_id, lease=lock.resource)
    started = clock()
    next_log = started
    try:
        while True:
            try:
                if lock.try_acquire():
                    break
                event, level, error = "lease_waiting", "info", None
            except WarehouseUnavailableError as exc:
                event, level, error = "lease_unavailable", "warning", str(exc)
            now = clock()
            if now >= next_log:
                getattr(log, level)(
                    event, waited=round(now - started, 1), poll=poll, error=error, role="standby"
                )
                next_log = now + log_every
            sleep(poll)
    except BaseException:
        lock.release()
        raise
    log.info("lease_acquired", waited=round(clock() - started, 1))
    return Lease(lock, merchant_id, heartbeat=heartbeat, on_lost=on_lost)


def _lock_for(warehouse: str | URL | Engine, merchant_id: str, *, lease_seconds: int) -> _Lock:
    url = warehouse.url if isinstance(warehouse, Engine) else warehouse_url(warehouse)
    backend = url.get_backend_name()
    if backend == "sqlite":
        path = _sqlite_file(url)
        if path is None:
            return _NoLock()
        return _FileLock(lock_file_path(path, merchant_id))
    if backend == "postgresql":
        return _PostgresLock(url, lease_key(merchant_id), lease_seconds=lease_seconds)
    if backend in MYSQL_FAMILY:
        name = mysql_lock_name(url.database or "", merchant_id)
        return _MariaDbLock(url, name, lease_seconds=lease_seconds)
    raise ConfigurationError(f"lease: unsupported warehouse database {backend!r}")


def _sqlite_file(url: URL) -> str | None:
    """The database file of a SQLite URL, or None for an in-memory database."""
    database = url.database or ""
    if url.query.get("uri") in {"true", "1"} and database.startswith("file:"):
        # SQLAlchemy moves the URI's parameters (mode=memory among them) into url.query.
        parts = urlsplit(database)
        if url.query.get("mode") == "memory" or "mode=memory" in parts.query:
            return None
        database = unquote(parts.path)
    if database in {"", ":memory:"}:
        return None
    return database


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
