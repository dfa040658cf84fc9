"""Hold the merchant's lease, or hand the work to its holder and follow it: what ``backfill``
and ``verify`` (and any command that reads a merchant's platform) do first.

A merchant's rate limit is spent by one process at a time (spec: Limits).  So a command first
tries to take the merchant's lease: free, it runs the work here under its own epoch, and a
daemon starting meanwhile waits for it.  Held by a daemon, the work is handed to that holder
as a request row (``warehouse.requests``); the holder runs it inside its own budget beside its
tail and this command follows the row until it is finished.

Following never waits on nobody: a holder runs a request under the merchant's lock, so the
lock found free means nobody runs it, and nobody will until a daemon takes the merchant (the
daemons stopped, a rollout scaled to zero).  The command then takes the lease back and runs
the work itself (``HeldHere.taken_back``); what becomes of the request then is the kind's
business (a backfill resumes its windows, a verify starts again).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import structlog

from recordsync.core.errors import RecordSyncError
from recordsync.core.stopping import Stopper
from recordsync.sync.events import SyncObserver
from recordsync.sync.resilience import StepRunner
from recordsync.warehouse import HolderRequest, Pause, RequestKind, RequestState
from recordsync.warehouse.requests.store import RequestStore

log = structlog.get_logger("recordsync")

FOLLOW_EVERY: Final = 1.0  # seconds between looks at a request handed to the holder


@dataclass(frozen=True, slots=True)
class HeldHere:
    """This command holds the merchant at ``epoch``: it runs the work itself.  ``taken_back``:
    the request it had handed over, which no holder ran to its end."""

    epoch: int
    taken_back: HolderRequest | None = None

    def run_again_here(self, requests: RequestStore) -> None:
        """For work that starts over (a verify, a reset): the request taken back is failed,
        so that no holder coming later runs it too."""
        if self.taken_back is None:
            return
        with contextlib.suppress(LookupError):  # a holder finished it meanwhile
            requests.finish(
                self.taken_back.id, failed="run by the requester: no holder ran it to its end"
            )


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


def hold_or_hand_over(
    kind: RequestKind,
    *,
    try_hold: Callable[[], int | None],
    ask: Callable[[], int],
    requests: RequestStore,
    stopper: Stopper,
    handed_over: Callable[[int], None] = lambda _request_id: None,
    progress: Callable[[HolderRequest], None] = lambda _request: None,
    before_taking: Callable[[], None] = lambda: None,
    follow_every: float = FOLLOW_EVERY,
) -> HeldHere | DoneThere:
    """Take the merchant's lease (``try_hold``), or hand the work over (``ask`` inserts the
    request) and follow it: ``progress`` sees the request at each look, ``handed_over`` its id
    once asked.  ``before_taking`` runs before every attempt at the lease and may refuse it
    (a merchant paused: ``refuse_if_paused``), so that a command never takes back the lease of
    a merchant paused while it followed.  A request that failed at its holder (or
    disappeared) raises ``RecordSyncError`` with the holder's reason; a stop raises
    ``ShutdownRequestedError``."""
    before_taking()
    epoch = try_hold()
    if epoch is not None:
        return HeldHere(epoch)
    runner = StepRunner(stopper=stopper, observer=SyncObserver(), fatal_is_final=True)
    request_id = runner.run(ask, what=f"request {kind.value}")
    handed_over(request_id)
    while True:
        request = runner.run(lambda: requests.get(request_id), what=f"follow {kind.value}")
        if request is None or request.state is RequestState.FAILED:
            reason = "the request disappeared" if request is None else request.error
            raise RecordSyncError(
                f"{kind.value} request {request_id} failed at its holder: {reason}"
            )
        progress(request)
        if request.state is RequestState.DONE:
            return DoneThere(request)
        before_taking()
        epoch = runner.run(try_hold, what="take the lease")
        if epoch is not None:
            taken_back = f"{kind.value}_taken_back"  # backfill_taken_back, verify_taken_back
            log.info(taken_back, request_id=request_id)
            return HeldHere(epoch, taken_back=request)
        stopper.sleep(follow_every)
