"""One replica's membership of the fleet: heartbeat, notice what was lost, move toward the
fair share (``share``), every tick or as soon as the fleet changes.

The warehouse holds the truth: a lease is a database lock that the database frees when its
holder dies, and every new holder raises the merchant's epoch, which each page commit checks
(fenced writes).  This loop only decides; ``Syncs`` (the service) starts a merchant's sync
under its epoch and stops it, committing the page in hand first, before the lock is given
back: a hand-over never has two writers.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Final, Protocol

import structlog

from recordsync.core.errors import WarehouseUnavailableError
from recordsync.core.settings import DEFAULT_FLEET_TICK, STALE_TICKS
from recordsync.core.stopping import Stopper
from recordsync.fleet.share import plan_moves

DEFAULT_TICK: Final = DEFAULT_FLEET_TICK  # RECORDSYNC_FLEET_TICK
# The longest pause between two ticks that failed (the warehouse unreachable for long), in
# ticks: 30 s at the default tick.
BACKOFF_TICKS: Final = 15
MAX_BACKOFF: Final = BACKOFF_TICKS * DEFAULT_TICK
# A replica whose heartbeat is older than this (by the database's clock) no longer counts:
# ``STALE_TICKS`` ticks (``Settings.heartbeat_stale_after``).
DEFAULT_STALE_AFTER: Final = STALE_TICKS * DEFAULT_TICK
STANDBY_LOG_EVERY: Final = 60.0
# How long a starting replica waits after announcing itself, for others starting with it (a
# tick, when the tick is shorter).
ANNOUNCE_WAIT: Final = 1.0

log = structlog.get_logger("recordsync.fleet")


class FleetSession(Protocol):
    """What the loop needs of the warehouse's fleet session (``Warehouse.fleet_session``)."""

    @property
    def exclusive(self) -> bool:
        """One lock for every merchant (SQLite): the holder takes all, others stand by."""
        ...

    def try_hold(self, merchant_id: str) -> int | None: ...

    def release(self, merchant_id: str) -> None: ...

    def still_held(self) -> frozenset[str]: ...

    def confirmed(self, merchant_id: str) -> bool:
        """Whether the merchant's lock was seen held recently enough (no I/O)."""
        ...

    def heartbeat(
        self, merchants_held: int, *, merchants: Collection[str] | None = None
    ) -> None: ...

    def live_replicas(self, stale_after: float) -> Mapping[str, Collection[str] | None]: ...

    def holders(self) -> dict[str, str]: ...

    def wait_for_change(self, timeout: float) -> bool: ...

    def leave(self) -> None: ...


class Syncs(Protocol):
    """The merchants' syncs, as the service runs them."""

    def start(self, merchant_id: str, epoch: int) -> None:
        """Start syncing ``merchant_id``, every commit fenced by ``epoch``."""
        ...

    def stop(self, merchant_id: str) -> None:
        """Stop it; return once the page in hand is committed (or abandoned)."""
        ...

    def running(self) -> frozenset[str]:
        """The merchants whose sync still runs (a fenced sync stops by itself)."""
        ...


class Member:
    def __init__(
        self,
        session: FleetSession,
        syncs: Syncs,
        *,
        replica_id: str,
        merchants: Collection[str],
        stopper: Stopper,
        tick: float = DEFAULT_TICK,
        stale_after: float | None = None,
        on_change: Callable[[frozenset[str], int], None] | None = None,
        paused: Callable[[], Collection[str]] = lambda: (),
        on_paused: Callable[[frozenset[str]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``paused()``: the merchants operators paused (``warehouse.controls``), read every
        tick: held by no replica, whatever the shares; ``on_paused`` is told them."""
        self.session = session
        self.syncs = syncs
        self.replica_id = replica_id
        self.merchants = tuple(merchants)
        self.stopper = stopper
        self.tick = tick
        self.stale_after = STALE_TICKS * tick if stale_after is None else stale_after
        self.on_change = on_change
        self._paused = paused
        self._on_paused = on_paused
        self.paused: frozenset[str] = frozenset()
        self.held: set[str] = set()
        self.live: dict[str, Collection[str] | None] = {}
        self._log = log.bind(replica_id=replica_id)
        self._clock = clock
        self._next_waiting_log: float | None = None
        self.failures = 0  # ticks that failed in a row: the next waits longer
        self._free_before: frozenset[str] = frozenset()  # merchants nobody held last tick

    def run(self) -> None:
        """Tick until stopped, then hand every merchant over at once and leave.

        The first tick only announces this replica and waits a second: replicas started
        together then see one another before taking merchants, instead of the first one
        taking them all and handing most of them over a moment later.
        """
        try:
            self._announce()
            while not self.stopper.stopped:
                self.step()
                self._wait(self.pause())
        finally:
            self.leave()

    def pause(self) -> float:
        """Until the next tick: ``tick``, doubled for each tick that failed in a row, at most
        ``BACKOFF_TICKS`` ticks.  Within the lease: a replica with merchants keeps them
        confirmed by its session's keeper, not by its ticks."""
        return min(self.tick * 2.0 ** min(self.failures, 8), BACKOFF_TICKS * self.tick)

    def _announce(self) -> None:
        try:
            self.session.heartbeat(0, merchants=self.merchants)
        except WarehouseUnavailableError as exc:
            self._log.warning("fleet_unavailable", error=str(exc), kind=type(exc).__name__, held=[])
        self._wait(min(self.tick, ANNOUNCE_WAIT))

    def _wait(self, seconds: float) -> None:
        """Until the next tick, or earlier when the fleet changes; an outage only waits."""
        try:
            self.session.wait_for_change(seconds)
        except WarehouseUnavailableError:
            self.stopper.wait(seconds)

    def step(self) -> None:
        """One tick: heartbeat, drop what was lost, then take and give toward the share.

        A tick that fails (the warehouse unreachable, or a bug) is tried again after a
        backoff (``pause``).  Meanwhile this replica keeps syncing what its lease is still
        confirmed for, and stops and gives back the rest: it never holds a lock while
        syncing nothing, nor syncs what it cannot confirm it holds.
        """
        try:
            self._step()
        except WarehouseUnavailableError as exc:
            self.failures += 1
            self._log.warning(
                "fleet_unavailable",
                error=str(exc),
                kind=type(exc).__name__,
                held=sorted(self.held),
                retry_in=round(self.pause(), 1),
            )
            self._drop_unconfirmed()
        except Exception as exc:  # noqa: BLE001 - a bug in a tick must not end the fleet
            self.failures += 1
            self._log.error(
                "fleet_tick_failed",
                kind=type(exc).__name__,
                where=_where(exc),
                retry_in=round(self.pause(), 1),
            )
            self._drop_unconfirmed()
        else:
            self.failures = 0
        self._report()

    def _drop_unconfirmed(self) -> None:
        """Stop, and give back, every merchant whose lease is not confirmed now."""
        lost = {merchant_id for merchant_id in self.held if not self.session.confirmed(merchant_id)}
        self._drop(lost, reason="lease not confirmed")
        for merchant_id in sorted(lost):
            self.session.release(merchant_id)  # never raises: the lock is free either way

    def leave(self) -> None:
        """Graceful stop: every page in hand committed, every lock given back at once."""
        for merchant_id in sorted(self.held):
            self.syncs.stop(merchant_id)
        self.held.clear()
        try:
            self.session.leave()
        except WarehouseUnavailableError as exc:
            self._log.warning("fleet_leave_failed", error=str(exc))
        self._report()
        self._log.info("fleet_left")

    def _step(self) -> None:
        self.session.heartbeat(len(self.held), merchants=self.merchants)
        lost = self.held - self.session.still_held()
        self._drop(lost, reason="lease lost")
        stopped = self.held - self.syncs.running()
        for merchant_id in sorted(stopped):  # fenced off, or failed: let another try
            self.session.release(merchant_id)
            self.held.discard(merchant_id)
            self._log.warning("merchant_sync_ended", merchant_id=merchant_id, action="released")
        self._obey_pauses()
        mine = tuple(m for m in self.merchants if m not in self.paused)
        self.live = dict(self.session.live_replicas(self.stale_after))
        # With one lock for everything, sharing would leave merchants nobody can take.
        share_among: dict[str, Collection[str] | None] = (
            {self.replica_id: None} if self.session.exclusive else dict(self.live)
        )
        for replica, configured in share_among.items():  # every replica plans without them
            if configured is not None:
                share_among[replica] = [m for m in configured if m not in self.paused]
        holders = self.session.holders()
        for merchant_id in self.held:
            holders[merchant_id] = self.replica_id
        free = frozenset(m for m in mine if m not in holders)
        moves = plan_moves(
            self.replica_id,
            merchants=mine,
            live=share_among,
            holders=holders,
            overdue=free & self._free_before,
        )
        self._free_before = free
        for merchant_id in moves.release:
            if self.stopper.stopped:
                return
            self.syncs.stop(merchant_id)
            self.session.release(merchant_id)
            self.held.discard(merchant_id)
            self._log.info("merchant_handed_over", merchant_id=merchant_id, live=len(self.live))
        for merchant_id in moves.acquire:
            if self.stopper.stopped:
                return
            epoch = self.session.try_hold(merchant_id)
            if epoch is None:
                continue  # another replica was quicker
            self.held.add(merchant_id)
            self.syncs.start(merchant_id, epoch)
            self._log.info("lease_acquired", merchant_id=merchant_id, epoch=epoch)
        self._say_if_standby(holders)

    def _obey_pauses(self) -> None:
        """Read which merchants are paused; stop and give back those held here (the page in
        hand committed first, as in any hand-over)."""
        paused = frozenset(self._paused())
        for merchant_id in sorted(self.held & paused):
            self.syncs.stop(merchant_id)
            self.session.release(merchant_id)
            self.held.discard(merchant_id)
            self._log.info("merchant_paused", merchant_id=merchant_id, action="released")
        self.paused = paused
        if self._on_paused is not None:
            self._on_paused(paused)

    def _say_if_standby(self, holders: dict[str, str]) -> None:
        """A replica that holds nothing while others hold everything stands by: say so at
        once, then once a minute, not every tick."""
        if self.held or not holders:
            self._next_waiting_log = None
            return
        now = self._clock()
        if self._next_waiting_log is None or now >= self._next_waiting_log:
            self._log.info(
                "lease_waiting", role="standby", held_elsewhere=len(holders), live=len(self.live)
            )
            self._next_waiting_log = now + STANDBY_LOG_EVERY

    def _drop(self, merchants: set[str], *, reason: str) -> None:
        for merchant_id in sorted(merchants):
            self.syncs.stop(merchant_id)
            self.held.discard(merchant_id)
            self._log.error("merchant_lost", merchant_id=merchant_id, reason=reason)

    def _report(self) -> None:
        if self.on_change is not None:
            self.on_change(frozenset(self.held), len(self.live))


def _where(exc: BaseException) -> str:
    """Where ``exc`` was raised (file:line function, innermost first), never its message."""
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    return " < ".join(
        f"{Path(frame.filename).name}:{frame.lineno} {frame.name}" for frame in reversed(frames)
    )
