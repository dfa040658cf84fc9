"""The fleet session: what one process needs to share the merchants with other processes.

Several processes (replicas) with one configuration and one warehouse share its merchants,
each merchant synced by exactly one of them at a time.  A process opens ONE session
(``Warehouse.fleet_session``) and, through it:

- takes merchants (``try_hold``): the merchant's lock, freed by the database or the kernel
  when the process dies (``fleet_locks``), then a new lease epoch (``leases``), which the
  process passes to every write for that merchant (``Warehouse.fenced``), so that a holder
  paused past its lock cannot commit once another took over;
- gives them back (``release``, ``leave``) and checks them (``still_held``);
- says it is alive and learns who else is (``heartbeat``, ``live_replicas``: the replicas
  table, by the database's clock), and which process holds what (``holders``);
- waits for a change (``wait_for_change``): PostgreSQL wakes it with a NOTIFY when a merchant
  is released, a replica leaves or one joins; elsewhere it sleeps the injected ``sleep``.

Rows (epochs, heartbeats) are written through the warehouse's pool, each in one transaction;
the locks live on the session's own connection.  The balancing (who should hold what) is the
caller's.  Calls are serialised (one thread at a time uses the session; a waiting
``wait_for_change`` holds the others off for at most its timeout).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

import structlog
from sqlalchemy import Connection, Engine, func, select

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.warehouse import leases, replicas
from recordsync.warehouse.connection import WRITE_OPTION, translate_errors
from recordsync.warehouse.fleet_locks import FLEET_CHANNEL, MerchantLocks
from recordsync.warehouse.schema import ID_LENGTH

_T = TypeVar("_T")
_log = structlog.get_logger(__name__)


class FleetSession:
    """One process's membership of the fleet; build it with ``Warehouse.fleet_session``.

    Every method may raise ``WarehouseUnavailableError``: from the session's own connection
    it means that connection was lost, and every lock with it (the session then holds
    nothing; the next call connects afresh); from a row write, that the warehouse is down.
    ``release``, ``leave`` and ``close`` never raise it: the locks are gone either way.
    """

    def __init__(
        self,
        engine: Engine,
        locks: MerchantLocks,
        replica_id: str,
        *,
        sleep: Callable[[float], None],
        hostname: str | None = None,
        pid: int | None = None,
    ) -> None:
        if not 0 < len(replica_id) <= ID_LENGTH:
            locks.close()
            raise ConfigurationError(f"a replica id has 1 to {ID_LENGTH} characters")
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})
        if engine.dialect.name in MYSQL_FAMILY:
            # MariaDB's REPEATABLE READ locks the gap where a row is missing, so two replicas
            # inserting their first lease or replica rows side by side would deadlock; READ
            # COMMITTED locks only the rows, which is all these one-row writes need.
            self._writer = self._writer.execution_options(isolation_level="READ COMMITTED")
        self._locks = locks
        self._replica_id = replica_id
        self._sleep = sleep
        self._hostname = hostname if hostname is not None else socket.gethostname()
        self._pid = pid if pid is not None else os.getpid()
        self._held: dict[str, int] = {}  # merchant -> the epoch this session was given
        self._io = threading.RLock()

    @property
    def replica_id(self) -> str:
        return self._replica_id

    @property
    def exclusive(self) -> bool:
        """One lock covers every merchant (SQLite): share nothing, hold all or stand by."""
        return self._locks.exclusive

    @property
    def resource(self) -> str:
        """What the locks are, for logs (never a password)."""
        return self._locks.resource

    def held(self) -> dict[str, int]:
        """merchant -> epoch of what this session believes it holds; no I/O (``still_held``
        asks the database)."""
        with self._io:
            return dict(self._held)

    def try_hold(self, merchant_id: str) -> int | None:
        """Take the merchant without waiting: its new epoch, or None when held elsewhere.

        The epoch is the merchant's previous one plus one (1 the first time), stamped with
        this replica and the database's time; every write for the merchant must carry it.
        A merchant this session already holds keeps its epoch (it is not raised again).
        """
        with self._io:
            if merchant_id in self._held:
                return self._held[merchant_id]
            if not self._on_lock_connection(lambda: self._locks.try_lock(merchant_id)):
                return None
            try:
                epoch = self._write(
                    "raise lease epoch",
                    lambda conn: leases.raise_epoch(conn, merchant_id, self._replica_id),
                )
            except BaseException:
                self._unlock_quietly(merchant_id)  # a lock without an epoch is no use
                raise
            self._held[merchant_id] = epoch
            _log.info("merchant_held", merchant_id=merchant_id, epoch=epoch)
            return epoch

    def release(self, merchant_id: str) -> None:
        """Give the merchant back (the caller has committed the page in hand) and announce it.

        Does nothing for a merchant not held.  Marking the lease released and the announcement
        are best effort: a failure is logged, the lock is free all the same.
        """
        with self._io:
            epoch = self._held.pop(merchant_id, None)
            if epoch is None:
                return
            self._unlock_quietly(merchant_id)

            def released(conn: Connection) -> None:
                leases.mark_released(conn, merchant_id, self._replica_id, epoch)
                self._publish(conn)

            self._write_quietly("release", released)
            _log.info("merchant_released", merchant_id=merchant_id, epoch=epoch)

    def still_held(self) -> frozenset[str]:
        """Which merchants this session still really holds, asked of the database (for the
        heartbeat); a merchant found lost is forgotten."""
        with self._io:
            if not self._held:
                return frozenset()
            merchants = frozenset(self._held)
            really = self._on_lock_connection(lambda: self._locks.held(merchants))
            for merchant_id in merchants - really:
                epoch = self._held.pop(merchant_id)
                _log.warning("merchant_lock_lost", merchant_id=merchant_id, epoch=epoch)
            return really

    def heartbeat(self, merchants_held: int) -> None:
        """Say this replica is alive (``heartbeat_at`` = the database's now), and keep the
        session's connection from looking silent to the server.  A replica's first heartbeat
        announces it, so the others make room for it at once."""

        def beat(conn: Connection) -> None:
            joined = replicas.beat(
                conn,
                self._replica_id,
                hostname=self._hostname,
                pid=self._pid,
                merchants_held=merchants_held,
            )
            if joined:
                self._publish(conn)
                _log.info("replica_joined", replica_id=self._replica_id)

        with self._io:
            self._write("heartbeat", beat)
            self._on_lock_connection(self._locks.keep_alive)

    def live_replicas(self, stale_after: float) -> list[str]:
        """Sorted ids of the replicas whose last heartbeat is younger than ``stale_after``
        seconds by the database's clock (this one included once it has beaten)."""
        with translate_errors("live replicas"), self._engine.begin() as conn:
            return replicas.live(conn, stale_after)

    def holders(self) -> dict[str, str]:
        """merchant -> replica, for the merchants whose lock is held right now (for status)."""
        with translate_errors("read leases"), self._engine.begin() as conn:
            claimed = leases.unreleased(conn)
        with self._io:
            return self._on_lock_connection(lambda: self._locks.holders(claimed))

    def wait_for_change(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for another replica to release, leave or join.

        True as soon as one was announced (PostgreSQL); False after the timeout, and always
        on MariaDB and SQLite, which sleep the injected ``sleep`` instead.
        """
        if not self._locks.listens:
            self._sleep(timeout)
            return False
        with self._io:
            return self._on_lock_connection(
                lambda: self._locks.wait(timeout, ignore=self._replica_id)
            )

    def leave(self) -> None:
        """Leave the fleet: give every merchant back, delete this replica's row, announce it.

        For a graceful stop: the others take the merchants over at once, not after a timeout.
        The session may be used again afterwards (it holds nothing).
        """
        with self._io:
            held, self._held = self._held, {}
            self._locks.drop_all()

            def left(conn: Connection) -> None:
                for merchant_id, epoch in held.items():
                    leases.mark_released(conn, merchant_id, self._replica_id, epoch)
                replicas.forget(conn, self._replica_id)
                self._publish(conn)

            self._write_quietly("leave", left)
            _log.info("replica_left", replica_id=self._replica_id, released=sorted(held))

    def close(self) -> None:
        """Drop every lock (without the goodbye of ``leave``) and the connection; safe twice."""
        with self._io:
            self._held.clear()
            self._locks.close()

    def _on_lock_connection(self, work: Callable[[], _T]) -> _T:
        """``work`` on the locks; a lost connection means every lock is gone."""
        try:
            return work()
        except WarehouseUnavailableError:
            if self._held:
                _log.warning("fleet_locks_lost", merchants=sorted(self._held))
            self._held.clear()
            raise

    def _unlock_quietly(self, merchant_id: str) -> None:
        # A lost connection took the lock with it, which is all we wanted.
        with contextlib.suppress(WarehouseUnavailableError):
            self._on_lock_connection(lambda: self._locks.unlock(merchant_id))

    def _write(self, action: str, work: Callable[[Connection], _T]) -> _T:
        with translate_errors(action), self._writer.begin() as conn:
            return work(conn)

    def _write_quietly(self, action: str, work: Callable[[Connection], None]) -> None:
        try:
            self._write(action, work)
        except WarehouseUnavailableError as error:
            _log.warning("fleet_bookkeeping_failed", step=action, error=str(error))

    def _publish(self, conn: Connection) -> None:
        """Announce a change to the other replicas, delivered when ``conn`` commits."""
        if conn.dialect.name == "postgresql":
            conn.execute(select(func.pg_notify(FLEET_CHANNEL, self._replica_id)))
