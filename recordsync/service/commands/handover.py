"""Hold the merchant's lease, or hand the work to its holder and follow it: what ``backfill``,
``merchant resync``, ``verify`` and ``merchant reset`` do (one mechanism, with a kind).

A merchant's rate limit is spent by one process at a time (spec: Limits), and its tail is read
by a daemon.  So a command never holds a merchant that a live daemon is configured with for
longer than a grace period (issue 35, point 2):

- it holds the lease itself only while no live replica configured with the merchant exists
  (the ``replicas`` rows, by the database's clock; on SQLite, where one lock covers every
  merchant, no live replica at all).  Held here, a watcher looks every second: as soon as a
  live daemon appears, the work stops (the page in hand committed), the lease is given back
  and the rest of the job is handed to that daemon as a request (``{kind}_handed_back``);
  a backfill or resync resumes from its job's windows there, a verify or reset starts again.
  So a restarted daemon holds its merchant within two ticks, whatever command is running;
- otherwise the work is handed to the holder as a ``sync_requests`` row and followed.  The
  lock is free for a moment at every graceful daemon stop, every rebalance and at the end of a
  sync: a free lock says nothing.  So the command takes the lease back only once no live
  replica configured with the merchant has existed for a lease and a tick
  (``TAKE_BACK_AFTER``: a daemon restarting announces itself well within it), then runs the
  rest itself (``{kind}_taken_back``).

Following is bounded: a request no holder started within its kind's limit
(``requests.book.START_WITHIN``, by the database's clock) expires as failed, and the command
ends with that reason (exit 1, verify 3).  An interrupted command (SIGINT, SIGTERM) cancels
its request, unless its kind carries on (``CARRIES_ON``: a backfill, which a daemon finishes
for whoever runs it next); its last line says which (``Handover.interrupted``).  Killed, it
cancels nothing: so every look notes that the command still follows (``followed_at``), and
no holder starts a request of a kind that does not carry on once its command has not looked
for ``FOLLOWED_WITHIN`` (five looks): it fails, "its command is gone".  A reset never runs
without a follower.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Final, Protocol, Self, TypeVar

import structlog

from recordsync.core.errors import RecordSyncError, ShutdownRequestedError
from recordsync.core.stopping import Stopper
from recordsync.fleet.member import DEFAULT_STALE_AFTER, DEFAULT_TICK
from recordsync.sync.events import SyncObserver
from recordsync.sync.resilience import StepRunner
from recordsync.warehouse import HolderRequest, Pause, RequestKind, RequestState
from recordsync.warehouse.requests.book import CARRIES_ON, FOLLOWED_WITHIN, START_WITHIN
from recordsync.warehouse.requests.store import RequestStore
from recordsync.warehouse.timeouts import LEASE_SECONDS

log = structlog.get_logger("recordsync")

FOLLOW_EVERY: Final = 1.0  # seconds between looks at a request handed to the holder
WATCH_EVERY: Final = 1.0  # seconds between looks for a live daemon while the work runs here
# Alone this long (no live daemon configured with the merchant), a follower takes the lease
# back: a dead daemon's lock is gone within the lease, and a restarting one announces itself
# at its first tick (a lease and a tick: those of the settings, ``merchant_command``).
TAKE_BACK_AFTER: Final = LEASE_SECONDS + DEFAULT_TICK
# ``CARRIES_ON`` (``requests.book``): kinds whose request is left to the holder when the
# command is interrupted or killed (a backfill's job is the range's, finished once for whoever
# asks next); every other kind needs its command following it (``FOLLOWED_WITHIN``).
# Kinds that start again from nothing when the command takes them back (no progress kept).
STARTS_OVER: Final = frozenset({RequestKind.VERIFY, RequestKind.RESET})

_T = TypeVar("_T")


class CommandLease(Protocol):
    """What a command needs of its fleet session (``Warehouse.fleet_session``)."""

    @property
    def exclusive(self) -> bool: ...

    def try_hold(self, merchant_id: str) -> int | None: ...

    def release(self, merchant_id: str) -> None: ...

    def live_replicas(self, stale_after: float) -> Mapping[str, Collection[str] | None]: ...


@dataclass(frozen=True, slots=True)
class HeldHere:
    """This command holds the merchant at ``epoch``: it runs the work itself.  ``taken_back``:
    the request of a kind that resumes (a backfill, a resync), which no holder ran to its
    end; the command marks it running here, then done."""

    epoch: int
    taken_back: HolderRequest | None = None


@dataclass(frozen=True, slots=True)
class DoneThere:
    """The holder ran the request to its end (``request.state`` is DONE)."""

    request: HolderRequest


def refuse_if_paused(
    paused: Callable[[list[str]], Mapping[str, Pause]], merchant_id: str, *, what: str
) -> None:
    """A paused merchant is synced by nobody, a command included: say so and stop.
    ``paused``: ``ControlStore.paused`` or ``WarehouseReader.paused``."""
    pause = paused([merchant_id]).get(merchant_id)
    if pause is not None:
        why = f" ({pause.reason})" if pause.reason else ""
        raise RecordSyncError(
            f"{what}: merchant {merchant_id} is paused since "
            f"{pause.since.isoformat(timespec='seconds')} by {pause.by}{why}; "
            f"`recordsync merchant resume {merchant_id}` first"
        )


class Handover:
    """One command's work on one merchant, here or at its holder (module docstring).

    ``ask`` inserts the request (with the job's key, so asked twice it is followed once);
    ``progress`` sees the request at each look, ``handed_over`` its id once asked;
    ``before_taking`` runs before every attempt at the lease and may refuse it (a merchant
    paused: ``refuse_if_paused``), so a command never takes the lease of a merchant paused
    while it followed.
    """

    def __init__(
        self,
        kind: RequestKind,
        merchant_id: str,
        *,
        lease: CommandLease,
        requests: RequestStore,
        stopper: Stopper,
        ask: Callable[[], int],
        before_taking: Callable[[], None] = lambda: None,
        handed_over: Callable[[int], None] = lambda _request_id: None,
        progress: Callable[[HolderRequest], None] = lambda _request: None,
        follow_every: float = FOLLOW_EVERY,
        watch_every: float = WATCH_EVERY,
        take_back_after: float = TAKE_BACK_AFTER,
        stale_after: float = DEFAULT_STALE_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if 3 * follow_every > FOLLOWED_WITHIN.total_seconds():
            # Looks that far apart would read to a holder as a command gone.
            raise ValueError(f"follow_every {follow_every} s: at most a third of FOLLOWED_WITHIN")
        self.kind = kind
        self.merchant_id = merchant_id
        self._lease = lease
        self._requests = requests
        self._stopper = stopper
        self._ask = ask
        self._before_taking = before_taking
        self._handed_over = handed_over
        self._progress = progress
        self._follow_every = follow_every
        self._watch_every = watch_every
        self._take_back_after = take_back_after
        self._stale_after = stale_after  # the fleet's: a replica beating less often is gone
        self._clock = clock
        self._runner = StepRunner(stopper=stopper, observer=SyncObserver(), fatal_is_final=True)
        # The request this command answers for: followed, or taken back and run here.
        self.request_id: int | None = None

    def run(self, here: Callable[[HeldHere, Stopper], _T]) -> _T | DoneThere:
        """``here(held, job)``: the work in this process under ``held.epoch``, stopping when
        ``job`` stops (a signal, or a daemon that appeared: the rest is then handed to it and
        followed).  What ``here`` returned, or the holder's ``DoneThere``.  A request that
        failed (at its holder, or expired) raises ``RecordSyncError`` with the reason; a stop
        raises ``ShutdownRequestedError``."""
        while True:
            outcome = self._hold_or_follow()
            if isinstance(outcome, DoneThere):
                return outcome
            job = Stopper(parent=self._stopper)
            watch = _DaemonWatch(self.live_daemon, job, self._watch_every)
            with watch:
                try:
                    result = here(outcome, job)
                except ShutdownRequestedError:
                    if watch.appeared is None or self._stopper.stopped:
                        raise
            if watch.appeared is None or self._stopper.stopped:
                return result
            handed_back = f"{self.kind.value}_handed_back"  # backfill_handed_back, ...
            log.info(handed_back, replica=watch.appeared, request_id=self.request_id)
            self._lease.release(self.merchant_id)

    def live_daemon(self) -> str | None:
        """A live replica configured with the merchant (one that did not say counts; on
        SQLite, one lock for all: any), or None."""
        live = self._lease.live_replicas(self._stale_after)
        for replica, merchants in live.items():
            if merchants is None or self._lease.exclusive or self.merchant_id in merchants:
                return replica
        return None

    def interrupted(self) -> str | None:
        """Cancel the request this command answers for, unless its kind carries on; what
        became of it, for the command's last line (None: nothing was handed over)."""
        request_id = self.request_id
        if request_id is None:
            return None
        if self.kind in CARRIES_ON:
            limit = START_WITHIN[self.kind].total_seconds()
            return (
                f"the daemon holding the merchant carries on with the job (request {request_id}; "
                f"it expires unless a daemon starts it within {limit:.0f} s of being asked); "
                "nothing is lost by stopping to follow it"
            )
        return self._cancel(request_id)

    def _cancel(self, request_id: int) -> str:
        try:
            was = self._requests.cancel(request_id)
        except LookupError:
            ended = self._requests.get(request_id)
            state = "gone" if ended is None else ended.state.value
            return f"request {request_id} had already ended ({state})"
        except RecordSyncError:
            limit = START_WITHIN[self.kind].total_seconds()
            return (
                f"request {request_id} could not be cancelled (the warehouse did not answer); "
                f"it expires unless a holder starts it within {limit:.0f} s of the asking"
            )
        cancelled = f"{self.kind.value}_cancelled"  # reset_cancelled, verify_cancelled, ...
        log.info(cancelled, request_id=request_id, was=was.value)
        if was is RequestState.PENDING:
            return f"request {request_id} cancelled before any holder started it: it never runs"
        if self.kind is RequestKind.RESET:
            return (
                f"request {request_id} cancelled, but its holder had started it: the re-anchor "
                "may have happened (`recordsync status` shows the rebuilds)"
            )
        return f"request {request_id} cancelled: its holder stops it within a few seconds"

    # -- the steps ------------------------------------------------------------------------------

    def _hold_or_follow(self) -> HeldHere | DoneThere:
        self._before_taking()
        alone_since: float | None = None
        if self._runner.run(self.live_daemon, what="look for daemons") is None:
            epoch = self._runner.run(self._try_hold, what="take the lease")
            if epoch is not None:
                return HeldHere(epoch)
            alone_since = self._clock()  # held by a command: taken once it lets go
        self._ask_now()
        while True:
            request = self._look()
            if request.state is RequestState.DONE:
                return DoneThere(request)
            if self._runner.run(self.live_daemon, what="look for daemons") is not None:
                alone_since = None
            else:
                alone_since = self._clock() if alone_since is None else alone_since
                if self._clock() - alone_since >= self._take_back_after:
                    self._before_taking()
                    epoch = self._runner.run(self._try_hold, what="take the lease")
                    if epoch is not None:
                        return self._taken_back(epoch, request, self._clock() - alone_since)
            self._stopper.sleep(self._follow_every)

    def _try_hold(self) -> int | None:
        return self._lease.try_hold(self.merchant_id)

    def _ask_now(self) -> None:
        request_id = self._runner.run(self._ask, what=f"request {self.kind.value}")
        self.request_id = request_id
        self._handed_over(request_id)

    def _look(self) -> HolderRequest:
        """The request as it stands now, noted as followed; a pending one past its limit
        expired first.  One cancelled by another command following the same work is asked for
        again."""
        while True:
            request_id = self.request_id
            assert request_id is not None
            request = self._follow(request_id)
            if request is not None and request.state is RequestState.PENDING:
                self._runner.run(lambda: self._requests.expire((self.merchant_id,)), what="expire")
                request = self._get(request_id)
            if request is not None and request.state is RequestState.CANCELLED:
                self._ask_now()  # another command of the same job was interrupted
                continue
            if request is None or request.state is RequestState.FAILED:
                reason = "the request disappeared" if request is None else request.error
                raise RecordSyncError(f"{self.kind.value} request {request_id} failed: {reason}")
            self._progress(request)
            return request

    def _follow(self, request_id: int) -> HolderRequest | None:
        return self._runner.run(lambda: self._requests.follow(request_id), what="follow")

    def _get(self, request_id: int) -> HolderRequest | None:
        return self._runner.run(lambda: self._requests.get(request_id), what="follow")

    def _taken_back(self, epoch: int, request: HolderRequest, alone: float) -> HeldHere:
        taken_back = f"{self.kind.value}_taken_back"  # backfill_taken_back, verify_taken_back
        log.info(taken_back, request_id=request.id, alone_seconds=round(alone, 1))
        if self.kind not in STARTS_OVER:
            return HeldHere(epoch, taken_back=request)
        # Run again here from the start: failed, so that no holder coming later runs it too.
        with contextlib.suppress(LookupError, RecordSyncError):  # a holder finished it meanwhile
            self._requests.finish(
                request.id, failed="run by the requester: no holder ran it to its end"
            )
        self.request_id = None
        return HeldHere(epoch)


class _DaemonWatch:
    """While the work runs here: look for a live daemon every ``every`` s; on the first found,
    note it (``appeared``) and stop ``job``."""

    def __init__(self, find: Callable[[], str | None], job: Stopper, every: float) -> None:
        self._find = find
        self._job = job
        self._every = every
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="daemon-watch", daemon=True)
        self.appeared: str | None = None

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(self._every) and not self._job.stopped:
            try:
                found = self._find()
            except RecordSyncError:
                continue  # the warehouse away: the work itself notices, or the next look does
            if found is not None:
                self.appeared = found
                self._job.stop()
                return
