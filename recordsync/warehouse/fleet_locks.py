"""All of one process's merchant locks, on one connection (or one file), for the fleet session.

Each backend's locks are freed by the database or the kernel when their holder dies, as in
``locks`` (which explains the silent-holder settings and the lock names); here one process
holds many of them at once:

- PostgreSQL: session advisory locks (the keys of ``locks.lease_key``), several on one
  ``LockConnection``, which also LISTENs on the fleet's channel, so a release elsewhere wakes
  this process at once.
- MariaDB: ``GET_LOCK`` (the names of ``locks.mysql_lock_name``), several on one connection.
- SQLite: one file lock beside the database (``<database file>.fleet.lock``) covering every
  merchant: the first process holds them all, a second holds none until the first is gone,
  as SQLite has one writer anyway.  An in-memory database has no other process to fear.

The keys and names are those an older, single-merchant daemon took (``locks``), so it and a
fleet replica never sync one merchant at once either, during an upgrade.  The calls are
serialised by the session (``fleet``); a lost connection raises ``WarehouseUnavailableError``
(every lock is gone with it) and the next call connects afresh.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final, Protocol

from sqlalchemy import Connection, text
from sqlalchemy.engine import URL

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.warehouse.connection import sqlite_file
from recordsync.warehouse.lease_support import check_sqlite_file
from recordsync.warehouse.locks import (
    FileLock,
    LockConnection,
    file_lock_owner,
    lease_key,
    mysql_lock_name,
)

# PostgreSQL's LISTEN/NOTIFY channel on which releases, departures and arrivals are announced.
FLEET_CHANNEL: Final = "recordsync_fleet"
# The advisory locks granted to this session, and to any session on this database: a bigint
# key is stored as classid (its high 32 bits) and objid (its low 32 bits) with objsubid 1.
_POSTGRES_OWN_LOCKS: Final = (
    "SELECT classid::bigint, objid::bigint FROM pg_locks WHERE locktype = 'advisory'"
    " AND granted AND objsubid = 1 AND pid = pg_backend_pid()"
)
_POSTGRES_DATABASE_LOCKS: Final = (
    "SELECT classid::bigint, objid::bigint FROM pg_locks WHERE locktype = 'advisory'"
    " AND granted AND objsubid = 1"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
# MariaDB: how many locks one status query asks about (a bounded statement).
_MARIADB_BATCH: Final = 200
_UINT32: Final = 2**32


class MerchantLocks(Protocol):
    """One process's merchant locks.  ``merchants`` arguments name the locks asked about."""

    resource: str  # what is locked, for logs (never a password)
    # One lock for every merchant (SQLite): the holder syncs them all, the others stand by.
    exclusive: bool
    listens: bool  # whether ``wait`` can be woken by a notification

    def try_lock(self, merchant_id: str) -> bool:
        """Take the merchant's lock without waiting; False when another holder has it."""
        ...

    def unlock(self, merchant_id: str) -> None: ...

    def held(self, merchants: Collection[str]) -> frozenset[str]:
        """Which of ``merchants`` this process still really holds (asked of the database)."""
        ...

    def holders(self, claimed: Mapping[str, str]) -> dict[str, str]:
        """Of ``claimed`` (merchant -> the holder its lease row names), the merchants whose
        lock is held right now, by anyone alive."""
        ...

    def keep_alive(self) -> None:
        """Show the server this session is alive (it ends silent ones); no-op unconnected."""
        ...

    def end_blockers(self, pid: int) -> list[int]:
        """End the sessions whose locks the server session ``pid`` waits for; their pids
        (none where the server needs no such help)."""
        ...

    def wait(self, timeout: float, *, ignore: str) -> bool:
        """Wait up to ``timeout`` s for a notification whose payload is not ``ignore``."""
        ...

    def drop_all(self) -> None:
        """Give every lock back at once (the connection closes; the next call reconnects)."""
        ...

    def close(self) -> None:
        """Drop every lock and release every resource; safe twice."""
        ...


def merchant_locks(
    url: URL, *, owner: str, lease_seconds: int, holding: bool = True
) -> MerchantLocks:
    """The merchant locks of the warehouse at ``url`` (its engine's), none taken yet.

    ``owner`` (the replica id) is written in SQLite's lock file, so others can say who holds it.
    ``holding``: they will be taken (not only asked about): a SQLite file on a network
    filesystem is refused (``lease_support``).
    """
    if lease_seconds < 1:
        raise ConfigurationError(f"lease_seconds must be at least 1, not {lease_seconds}")
    backend = url.get_backend_name()
    if backend == "sqlite":
        path = sqlite_file(url)
        if path is None:
            return _InMemoryLocks()
        if holding:
            check_sqlite_file(path)
        lock_path = Path(f"{os.path.abspath(path)}.fleet.lock")  # noqa: PTH100 - keeps symlinks
        return _FileLocks(lock_path, owner=owner)
    if backend == "postgresql":
        return _PostgresLocks(url, lease_seconds=lease_seconds)
    if backend in MYSQL_FAMILY:
        return _MariaDbLocks(url, lease_seconds=lease_seconds)
    raise ConfigurationError(f"fleet: unsupported warehouse database {backend!r}")


class _PostgresLocks:
    exclusive = False
    listens = True

    def __init__(self, url: URL, *, lease_seconds: int) -> None:
        self.resource = f"postgresql advisory locks on {url.database}"
        self._conn = LockConnection(url, lease_seconds=lease_seconds, on_connect=_listen)
        # The server ends a session idle for lease_seconds: a long wait is cut into shorter
        # ones with a keep-alive between them.
        self._longest_wait = max(0.5, lease_seconds / 2)

    def try_lock(self, merchant_id: str) -> bool:
        got = self._conn.scalar(
            "SELECT pg_try_advisory_lock(:key)", "fleet lock", key=lease_key(merchant_id)
        )
        return bool(got)

    def unlock(self, merchant_id: str) -> None:
        self._conn.scalar(
            "SELECT pg_advisory_unlock(:key)", "fleet unlock", key=lease_key(merchant_id)
        )

    def held(self, merchants: Collection[str]) -> frozenset[str]:
        if not self._conn.connected:
            return frozenset()
        rows = self._conn.rows(_POSTGRES_OWN_LOCKS, "fleet heartbeat")
        return _with_keys(merchants, rows)

    def holders(self, claimed: Mapping[str, str]) -> dict[str, str]:
        rows = self._conn.rows(_POSTGRES_DATABASE_LOCKS, "fleet holders")
        locked = _with_keys(claimed, rows)
        return {merchant: holder for merchant, holder in claimed.items() if merchant in locked}

    def keep_alive(self) -> None:
        if self._conn.connected:
            self._conn.scalar("SELECT 1", "fleet heartbeat")

    def end_blockers(self, pid: int) -> list[int]:
        rows = self._conn.rows(
            "SELECT blocker, pg_terminate_backend(blocker) FROM"
            " unnest(pg_blocking_pids(:pid)) AS blockers(blocker)",
            "end stale writes",
            pid=pid,
        )
        return [int(blocker) for blocker, ended in rows if ended]

    def wait(self, timeout: float, *, ignore: str) -> bool:
        rounds = max(1, math.ceil(timeout / self._longest_wait))
        for round_ in range(rounds):
            if round_:
                self.keep_alive()
            if self._conn.run(lambda conn: _notified(conn, timeout / rounds, ignore), "fleet wait"):
                return True
        return False

    def drop_all(self) -> None:
        self._conn.close()

    def close(self) -> None:
        self._conn.dispose()


def _listen(conn: Connection) -> None:
    conn.execute(text(f"LISTEN {FLEET_CHANNEL}"))


def _notified(conn: Connection, timeout: float, ignore: str) -> bool:
    """Whether a notification not from ``ignore`` arrives within ``timeout`` s (psycopg 3
    keeps the ones that came while nobody waited, and hands them over first)."""
    import psycopg  # noqa: PLC0415 - PostgreSQL's driver, present whenever this runs

    driver: Any = conn.connection.driver_connection  # psycopg's Connection
    try:
        return any(note.payload != ignore for note in driver.notifies(timeout=timeout))
    except psycopg.Error as error:
        raise WarehouseUnavailableError(
            f"warehouse unavailable (fleet wait): {type(error).__name__}"
        ) from error


def _with_keys(merchants: Collection[str], rows: list[tuple[Any, ...]]) -> frozenset[str]:
    """The merchants whose advisory key is among ``rows`` of (classid, objid)."""
    keys = {_signed64(int(high) * _UINT32 + int(low)) for high, low in rows}
    return frozenset(merchant for merchant in merchants if lease_key(merchant) in keys)


def _signed64(value: int) -> int:
    return value - 2**64 if value >= 2**63 else value


class _MariaDbLocks:
    exclusive = False
    listens = False

    def __init__(self, url: URL, *, lease_seconds: int) -> None:
        self._database = url.database or ""
        self.resource = f"mariadb locks on {self._database}"
        self._conn = LockConnection(url, lease_seconds=lease_seconds)

    def try_lock(self, merchant_id: str) -> bool:
        got = self._conn.scalar(
            "SELECT GET_LOCK(:name, 0)", "fleet lock", name=self._name(merchant_id)
        )
        return got == 1

    def unlock(self, merchant_id: str) -> None:
        self._conn.scalar(
            "SELECT RELEASE_LOCK(:name)", "fleet unlock", name=self._name(merchant_id)
        )

    def held(self, merchants: Collection[str]) -> frozenset[str]:
        if not self._conn.connected:
            return frozenset()
        return self._which(merchants, "IS_USED_LOCK(:{}) = CONNECTION_ID()", "fleet heartbeat")

    def holders(self, claimed: Mapping[str, str]) -> dict[str, str]:
        locked = self._which(claimed, "IS_USED_LOCK(:{}) IS NOT NULL", "fleet holders")
        return {merchant: holder for merchant, holder in claimed.items() if merchant in locked}

    def keep_alive(self) -> None:
        if self._conn.connected:
            self._conn.scalar("SELECT 1", "fleet heartbeat")

    def end_blockers(self, pid: int) -> list[int]:
        """A silent client is ended by the server itself (net_read_timeout)."""
        return []

    def wait(self, timeout: float, *, ignore: str) -> bool:
        raise NotImplementedError("MariaDB has no notifications: the session sleeps instead")

    def drop_all(self) -> None:
        self._conn.close()

    def close(self) -> None:
        self._conn.dispose()

    def _name(self, merchant_id: str) -> str:
        return mysql_lock_name(self._database, merchant_id)

    def _which(self, merchants: Collection[str], test: str, action: str) -> frozenset[str]:
        """The merchants whose lock passes ``test`` (SQL with ``:{}`` for the lock name)."""
        ordered = sorted(merchants)
        found: set[str] = set()
        for first in range(0, len(ordered), _MARIADB_BATCH):
            batch = ordered[first : first + _MARIADB_BATCH]
            columns = ", ".join(test.format(f"n{i}") for i in range(len(batch)))
            names = {f"n{i}": self._name(merchant) for i, merchant in enumerate(batch)}
            answers = self._conn.rows(f"SELECT {columns}", action, **names)[0]
            found.update(m for m, answer in zip(batch, answers, strict=True) if answer == 1)
        return frozenset(found)


class _FileLocks:
    """SQLite: one file lock for every merchant; unlocking one merchant keeps it."""

    exclusive = True

    listens = False

    def __init__(self, path: Path, *, owner: str) -> None:
        self.resource = f"file {path}"
        self._path = path
        self._owner = owner
        self._lock = FileLock(path, owner=owner)

    def try_lock(self, merchant_id: str) -> bool:
        if self._lock.verify():
            return True
        self._lock.release()  # a deleted or replaced lock file locks nobody out: start over
        return self._lock.try_acquire()

    def unlock(self, merchant_id: str) -> None:
        """Nothing to do: the one file lock covers the merchants still held."""

    def held(self, merchants: Collection[str]) -> frozenset[str]:
        return frozenset(merchants) if self._lock.verify() else frozenset()

    def holders(self, claimed: Mapping[str, str]) -> dict[str, str]:
        owner = self._owner if self._lock.verify() else file_lock_owner(self._path)
        return {merchant: holder for merchant, holder in claimed.items() if holder == owner}

    def keep_alive(self) -> None:
        """The kernel needs no keep-alive."""

    def end_blockers(self, pid: int) -> list[int]:
        """One process writes SQLite: nobody to end."""
        return []

    def wait(self, timeout: float, *, ignore: str) -> bool:
        raise NotImplementedError("SQLite has no notifications: the session sleeps instead")

    def drop_all(self) -> None:
        self._lock.release()

    def close(self) -> None:
        self._lock.release()


class _InMemoryLocks:
    """In-memory SQLite: one process, one connection pool, nobody to lock out."""

    exclusive = True

    listens = False
    resource = "in-memory sqlite (no lock needed)"

    def try_lock(self, merchant_id: str) -> bool:
        return True

    def unlock(self, merchant_id: str) -> None:
        pass

    def held(self, merchants: Collection[str]) -> frozenset[str]:
        return frozenset(merchants)

    def holders(self, claimed: Mapping[str, str]) -> dict[str, str]:
        return dict(claimed)

    def keep_alive(self) -> None:
        pass

    def end_blockers(self, pid: int) -> list[int]:
        """One process writes SQLite: nobody to end."""
        return []

    def wait(self, timeout: float, *, ignore: str) -> bool:
        raise NotImplementedError("SQLite has no notifications: the session sleeps instead")

    def drop_all(self) -> None:
        pass

    def close(self) -> None:
        pass
