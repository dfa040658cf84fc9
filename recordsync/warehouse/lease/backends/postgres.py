"""PostgreSQL: session advisory locks, all of a process's on one ``LockConnection``, which
also LISTENs on the fleet's channel, so a release elsewhere wakes this process at once."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any, Final

from sqlalchemy import Connection, text
from sqlalchemy.engine import URL

from recordsync.core.errors import WarehouseUnavailableError
from recordsync.warehouse.lease.connection import LockConnection
from recordsync.warehouse.lease.keys import lease_key

# LISTEN/NOTIFY channel on which releases, departures and arrivals are announced.
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
_UINT32: Final = 2**32


class PostgresLocks:
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
