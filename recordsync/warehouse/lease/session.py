"""The fleet session: what one process needs to share the merchants with other processes.

Several processes (replicas) with one configuration and one warehouse share its merchants,
each merchant synced by exactly one of them at a time.  A process opens ONE session
(``Warehouse.fleet_session``) and, through it:

- takes merchants (``try_hold``): the merchant's lock, freed by the database or the kernel
  when the process dies (``backends``), then a new lease epoch (``epochs``), which the
  process passes to every write for that merchant (``Warehouse.fenced``), so that a holder
  paused past its lock cannot commit once another took over;
- gives them back (``release``, ``leave``) and checks them (``still_held``);
- says it is alive and learns who else is (``heartbeat``, ``live_replicas``: the replicas
  table, by the database's clock), and which process holds what (``holders``);
- waits for a change (``wait_for_change``): PostgreSQL wakes it with a NOTIFY when a merchant
  is released, a replica leaves or one joins; elsewhere it sleeps the injected ``sleep``.

Rows (epochs, heartbeats) are written through the warehouse's pool, each in one transaction;
the locks live on the session's own connection.  The balancing (who should hold what) is the
caller's.

While it holds anything, a small thread of the session's own (the keeper) asks the database
every ``KEEP_EVERY`` seconds which locks it still holds: that keeps the lock connection from
looking silent to the server whatever the caller's loop is doing (a slow tick, a long epoch
raise), and it dates each merchant's last confirmation.  A merchant is
``confirmed`` for ``lease_seconds - CONFIRM_MARGIN`` after the moment its lock was last seen
held: the server cannot free it sooner, since a silent session is ended only
``lease_seconds`` after the last statement it received, which came after that moment.  Past
it (the database unreachable, a cut, a pause of this process), the caller must send nothing
more for the merchant: the lease may be someone else's soon.  A lock found lost is
forgotten, and ``on_lost`` is told at once.

No I/O happens under the lock that guards the session's state:
``confirmed`` runs before every request of every merchant and the keeper must look in time,
so neither may wait for one merchant's takeover (a pool checkout, a row lock behind a stale
holder's write).  They read state copied under ``_io``; a takeover or a release works on the
database outside it, under a guard of that merchant alone, and commits what it learnt under
``_io`` only if the lock connection has not been lost (or dropped) meanwhile: every loss
counts a new ``_generation``, and what was seen on an older one is not trusted.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Collection
from typing import Final, TypeVar

import structlog
from sqlalchemy import Connection, Engine, func, select

from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.warehouse.connection import side_by_side_writer, translate_errors
from recordsync.warehouse.lease import epochs, replicas
from recordsync.warehouse.lease.backends import FLEET_CHANNEL, MerchantLocks
from recordsync.warehouse.schema import ID_LENGTH
from recordsync.warehouse.timeouts import LEASE_SECONDS
from recordsync.warehouse.values import ReplicaVersion

_T = TypeVar("_T")
_log = structlog.get_logger(__name__)

KEEP_EVERY: Final = 2.0  # seconds between the keeper's looks at the locks (at most)
CONFIRM_MARGIN: Final = 2.0  # seconds of a lease never counted on (scheduling, the clock)
WAIT_CHUNK: Final = 1.0  # the longest a notification wait holds the lock connection
# How long an epoch raise waits for a stale holder's write before ending it (PostgreSQL).
END_STALE_AFTER: Final = 1.0


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
        lease_seconds: int = LEASE_SECONDS,
        on_lost: Callable[[frozenset[str]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        hostname: str | None = None,
        pid: int | None = None,
    ) -> None:
        if not 0 < len(replica_id) <= ID_LENGTH:
            locks.close()
            raise ConfigurationError(f"a replica id has 1 to {ID_LENGTH} characters")
        self._engine = engine
        # Two replicas insert their first lease or replica rows side by side.
        self._writer = side_by_side_writer(engine)
        self._locks = locks
        self._replica_id = replica_id
        self._sleep = sleep
        self._hostname = hostname if hostname is not None else socket.gethostname()
        self._pid = pid if pid is not None else os.getpid()
        self._held: dict[str, int] = {}  # merchant -> the epoch this session was given
        self._confirmed: dict[str, float] = {}  # merchant -> ``clock`` when last seen held
        self._valid_for = max(lease_seconds - CONFIRM_MARGIN, lease_seconds / 2)
        # Several looks within a lease, so that one slow look never lets the session idle out.
        self._keep_every = min(KEEP_EVERY, lease_seconds / 4)
        self._on_lost = on_lost
        self._clock = clock
        # _io guards the session's state (the dicts, the generation) and is held for no I/O and
        # no other lock; _conn guards the lock connection; _guards[merchant] serializes one
        # merchant's take and release (taken before either of the others).
        self._io = threading.Lock()
        self._conn = threading.RLock()
        self._guards: dict[str, threading.Lock] = {}
        self._generation = 0  # + 1 whenever the locks' connection is lost or dropped
        self._keeper: threading.Thread | None = None
        self._keeper_stop = threading.Event()

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
        with self._guard(merchant_id):
            with self._io:
                if merchant_id in self._held:
                    return self._held[merchant_id]
                generation = self._generation
            if not self._on_lock_connection(lambda: self._locks.try_lock(merchant_id)):
                return None
            try:
                # Bounded: the pool's lock wait (``timeouts``) ends a raise held up by a
                # fenced write of a holder gone silent; the next tick tries again.
                epoch = self._write(
                    "raise lease epoch", lambda conn: self._raise(conn, merchant_id)
                )
            except BaseException:
                self._unlock_quietly(merchant_id)  # a lock without an epoch is no use
                raise
            # Never an epoch without the lock: the lock connection may have died during the
            # raise (its session ended), and another process may hold the lock by now.
            checked_at = self._clock()
            ours = self._on_lock_connection(lambda: self._locks.held({merchant_id}))
            with self._io:
                kept = merchant_id in ours and self._generation == generation
                if kept:
                    self._held[merchant_id] = epoch
                    self._confirmed[merchant_id] = checked_at
            if not kept:
                self._unlock_quietly(merchant_id)  # a lock taken on a newer connection
                _log.warning(
                    "lease_lock_lost_while_raising",
                    merchant_id=merchant_id,
                    epoch=epoch,
                    action="not taken: the lock is not this process's any more",
                )
                return None
            self._start_keeper()
            _log.info("merchant_held", merchant_id=merchant_id, epoch=epoch)
            return epoch

    def release(self, merchant_id: str) -> None:
        """Give the merchant back (the caller has committed the page in hand) and announce it.

        Does nothing for a merchant not held.  Marking the lease released and the announcement
        are best effort: a failure is logged, the lock is free all the same.
        """
        with self._guard(merchant_id):
            with self._io:
                epoch = self._held.pop(merchant_id, None)
                self._confirmed.pop(merchant_id, None)
            if epoch is None:
                return
            self._unlock_quietly(merchant_id)

            def released(conn: Connection) -> None:
                epochs.mark_released(conn, merchant_id, self._replica_id, epoch)
                self._publish(conn)

            self._write_quietly("release", released)
            _log.info("merchant_released", merchant_id=merchant_id, epoch=epoch)

    def still_held(self) -> frozenset[str]:
        """Which merchants this session still really holds, asked of the database (for the
        heartbeat); a merchant found lost is forgotten."""
        with self._io:
            merchants = frozenset(self._held)
            generation = self._generation
        if not merchants:
            return frozenset()
        asked_at = self._clock()
        try:
            really = self._on_lock_connection(lambda: self._locks.held(merchants))
        except WarehouseUnavailableError:
            self._lost(merchants)
            raise
        with self._io:
            if self._generation != generation:  # asked of a connection lost since
                return really & self._held.keys()
            for merchant_id in really & self._held.keys():
                self._confirmed[merchant_id] = asked_at
            gone = (merchants - really) & self._held.keys()
            for merchant_id in gone:
                epoch = self._held.pop(merchant_id)
                self._confirmed.pop(merchant_id, None)
                _log.warning("merchant_lock_lost", merchant_id=merchant_id, epoch=epoch)
        if gone:
            self._tell_lost(frozenset(gone))
        return really

    def confirmed(self, merchant_id: str) -> bool:
        """Whether this session's lock of the merchant was seen held recently enough that
        nobody else can hold it yet (module docstring); no I/O."""
        with self._io:
            seen = self._confirmed.get(merchant_id)
        return seen is not None and self._clock() - seen < self._valid_for

    def _raise(self, conn: Connection, merchant_id: str) -> int:
        """Raise the merchant's epoch; on PostgreSQL, a write of a stale holder that keeps the
        raise waiting longer than ``END_STALE_AFTER`` is ended.

        Only the lock's holder raises, and it holds the lock now, so whatever still holds the
        lease row is a write of a holder gone: its fence check passed before it lost the lock,
        and it has stopped (paused, cut off).  PostgreSQL ends a silent transaction, but not
        one whose client stopped in the middle of sending a message (it waits in ClientRead,
        where neither statement_timeout nor idle_in_transaction_session_timeout apply), so
        the new holder ends it: its commit is rolled back, nothing of it stored.
        """
        pid = backend_pid(conn)
        timer = None
        if pid is not None:
            timer = threading.Timer(END_STALE_AFTER, self._end_stale, args=(merchant_id, pid))
            timer.daemon = True
            timer.start()
        try:
            return epochs.raise_epoch(conn, merchant_id, self._replica_id)
        finally:
            if timer is not None:
                timer.cancel()

    def _end_stale(self, merchant_id: str, pid: int) -> None:
        try:
            ended = self._on_lock_connection(lambda: self._locks.end_blockers(pid))
        except Exception as exc:  # noqa: BLE001 - a timer's failure must not go unsaid
            _log.warning("stale_write_not_ended", merchant_id=merchant_id, error=str(exc))
            return
        if ended:
            _log.warning(
                "stale_write_ended",
                merchant_id=merchant_id,
                sessions=ended,
                action="a write of a holder gone kept the new epoch waiting: its session was "
                "ended, its commit rolled back",
            )

    def _start_keeper(self) -> None:
        if self._keeper is None or not self._keeper.is_alive():
            self._keeper_stop.clear()
            self._keeper = threading.Thread(
                target=self._keep, name=f"lease-keeper-{self._replica_id}", daemon=True
            )
            self._keeper.start()

    def _keep(self) -> None:
        """The keeper: confirm the locks every ``KEEP_EVERY`` s while any is held."""
        while not self._keeper_stop.wait(self._keep_every):
            with self._io:
                if not self._held:
                    continue
            try:
                self.still_held()
            except WarehouseUnavailableError as exc:
                _log.warning("lease_keeper_failed", error=str(exc), action="locks lost")
            except Exception as exc:  # noqa: BLE001 - a bug must not end the keeper silently
                _log.error("lease_keeper_crashed", kind=type(exc).__name__)

    def _guard(self, merchant_id: str) -> threading.Lock:
        """The lock serializing ``merchant_id``'s take and release (one per merchant)."""
        with self._io:
            return self._guards.setdefault(merchant_id, threading.Lock())

    def _lost(self, merchants: Collection[str]) -> None:
        """The lock connection is gone, and every lock with it."""
        with self._io:
            self._generation += 1
            gone = frozenset(merchants) & self._held.keys()
            for merchant_id in gone:
                self._held.pop(merchant_id, None)
                self._confirmed.pop(merchant_id, None)
        if gone:
            self._tell_lost(gone)

    def _tell_lost(self, merchants: frozenset[str]) -> None:
        if self._on_lost is not None:
            self._on_lost(merchants)

    def heartbeat(self, merchants_held: int, *, merchants: Collection[str] | None = None) -> None:
        """Say this replica is alive (``heartbeat_at`` = the database's now), and keep the
        session's connection from looking silent to the server.  A replica's first heartbeat
        announces it, with the ``merchants`` it is configured with, so the others make room
        for it at once."""

        def beat(conn: Connection) -> None:
            joined = replicas.beat(
                conn,
                self._replica_id,
                hostname=self._hostname,
                pid=self._pid,
                merchants_held=merchants_held,
                merchants=merchants,
            )
            if joined:
                self._publish(conn)
                _log.info("replica_joined", replica_id=self._replica_id)

        self._write("heartbeat", beat)
        self._on_lock_connection(self._locks.keep_alive)

    def live_replicas(self, stale_after: float) -> dict[str, frozenset[str] | None]:
        """The replicas whose last heartbeat is younger than ``stale_after`` seconds by the
        database's clock (this one included once it has beaten), sorted by id, each with the
        merchants it is configured with (None: an older replica that did not say)."""
        with translate_errors("live replicas"), self._engine.begin() as conn:
            return replicas.live(conn, stale_after)

    def replica_version(self, replica_id: str) -> ReplicaVersion | None:
        """What ``replica_id`` said of itself (its version, the request kinds it takes); None
        when it has no row."""
        with translate_errors("read replicas"), self._engine.begin() as conn:
            return replicas.version_of(conn, replica_id)

    def holders(self) -> dict[str, str]:
        """merchant -> replica, for the merchants whose lock is held right now (for status)."""
        with translate_errors("read leases"), self._engine.begin() as conn:
            claimed = epochs.unreleased(conn)
        return self._on_lock_connection(lambda: self._locks.holders(claimed))

    def wait_for_change(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for another replica to release, leave or join.

        True as soon as one was announced (PostgreSQL); False after the timeout, and always
        on MariaDB and SQLite, which sleep the injected ``sleep`` instead.
        """
        if not self._locks.listens:
            self._sleep(timeout)
            return False
        # In chunks: the keeper uses the same connection, and must not wait for long.
        chunks = max(1, math.ceil(timeout / WAIT_CHUNK))
        for _ in range(chunks):
            if self._on_lock_connection(
                lambda: self._locks.wait(timeout / chunks, ignore=self._replica_id)
            ):
                return True
        return False

    def leave(self) -> None:
        """Leave the fleet: give every merchant back, delete this replica's row, announce it.

        For a graceful stop: the others take the merchants over at once, not after a timeout.
        The session may be used again afterwards (it holds nothing).
        """
        held = self._forget_all()
        with self._conn:
            self._locks.drop_all()
        # A take that saw its lock just before the drop: given back with the rest.
        held.update(self._forget_all())

        def left(conn: Connection) -> None:
            for merchant_id, epoch in held.items():
                epochs.mark_released(conn, merchant_id, self._replica_id, epoch)
            replicas.forget(conn, self._replica_id)
            self._publish(conn)

        self._write_quietly("leave", left)
        _log.info("replica_left", replica_id=self._replica_id, released=sorted(held))

    def close(self) -> None:
        """Drop every lock (without the goodbye of ``leave``) and the connection; safe twice."""
        self._keeper_stop.set()
        keeper = self._keeper
        if keeper is not None and keeper is not threading.current_thread():
            keeper.join(30)
        self._forget_all()
        with self._conn:
            self._locks.close()
        self._forget_all()

    def _forget_all(self) -> dict[str, int]:
        """Forget every merchant held (their locks are being dropped): merchant -> epoch."""
        with self._io:
            held, self._held = self._held, {}
            self._confirmed.clear()
            self._generation += 1
            return held

    def _on_lock_connection(self, work: Callable[[], _T]) -> _T:
        """``work`` on the locks; a lost connection means every lock is gone."""
        try:
            with self._conn:
                return work()
        except WarehouseUnavailableError:
            with self._io:
                held = sorted(self._held)
            if held:
                _log.warning("fleet_locks_lost", merchants=held)
            self._lost(held)
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


def backend_pid(conn: Connection) -> int | None:
    """The server session of ``conn`` (PostgreSQL); None elsewhere."""
    if conn.dialect.name != "postgresql":
        return None
    return int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
