"""MariaDB: ``GET_LOCK``, all of a process's on one ``LockConnection``."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final

from sqlalchemy.engine import URL

from recordsync.warehouse.lease.connection import LockConnection
from recordsync.warehouse.lease.keys import mysql_lock_name

# How many locks one status query asks about (a bounded statement).
_MARIADB_BATCH: Final = 200


class MariaDbLocks:
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
