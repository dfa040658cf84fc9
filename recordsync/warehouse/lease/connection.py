"""The connection the merchant locks live on (PostgreSQL and MariaDB; SQLite locks a file,
``backends.sqlite``): the database frees them when it ends, so a crashed replica never blocks
a takeover and no cleanup code of ours is needed.

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

from collections.abc import Callable
from typing import Any, Final, TypeVar

import structlog
from sqlalchemy import Connection, Engine, create_engine, pool, text
from sqlalchemy.engine import URL

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.warehouse.connection import translate_errors

_CONNECT_TIMEOUT_S: Final = 10
_KEEPALIVE_COUNT: Final = 3
_KEEPALIVE_IDLE_MAX_S: Final = 10
_KEEPALIVE_INTERVAL_MAX_S: Final = 5

_T = TypeVar("_T")

_log = structlog.get_logger(__name__)


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
