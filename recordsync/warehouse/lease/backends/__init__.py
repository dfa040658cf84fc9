"""All of one process's merchant locks, on one connection (or one file), for the fleet session.

Each backend's locks are freed by the database or the kernel when their holder dies; one
process holds many of them at once:

- PostgreSQL (``postgres``): session advisory locks (``keys.lease_key``), several on one
  ``LockConnection``, which also LISTENs on the fleet's channel, so a release elsewhere wakes
  this process at once.
- MariaDB (``mariadb``): ``GET_LOCK`` (``keys.mysql_lock_name``), several on one connection.
- SQLite (``sqlite``): one file lock beside the database covering every merchant; an
  in-memory database has no other process to fear.

The calls are serialised by the session (``session``); a lost connection raises
``WarehouseUnavailableError`` (every lock is gone with it) and the next call connects afresh.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Protocol

from sqlalchemy.engine import URL

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.core.errors import ConfigurationError
from recordsync.warehouse.connection import sqlite_file
from recordsync.warehouse.lease.backends.mariadb import MariaDbLocks
from recordsync.warehouse.lease.backends.postgres import FLEET_CHANNEL, PostgresLocks
from recordsync.warehouse.lease.backends.sqlite import FileLocks, InMemoryLocks
from recordsync.warehouse.lease.support import check_sqlite_file

__all__ = ["FLEET_CHANNEL", "MerchantLocks", "merchant_locks"]


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
    filesystem is refused (``support``).
    """
    if lease_seconds < 1:
        raise ConfigurationError(f"lease_seconds must be at least 1, not {lease_seconds}")
    backend = url.get_backend_name()
    if backend == "sqlite":
        path = sqlite_file(url)
        if path is None:
            return InMemoryLocks()
        if holding:
            check_sqlite_file(path)
        lock_path = Path(f"{os.path.abspath(path)}.fleet.lock")  # noqa: PTH100 - keeps symlinks
        return FileLocks(lock_path, owner=owner)
    if backend == "postgresql":
        return PostgresLocks(url, lease_seconds=lease_seconds)
    if backend in MYSQL_FAMILY:
        return MariaDbLocks(url, lease_seconds=lease_seconds)
    raise ConfigurationError(f"fleet: unsupported warehouse database {backend!r}")
