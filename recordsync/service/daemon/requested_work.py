"""The holder's side of a hand-over: run the work commands asked of the merchants held here
(``sync_requests``, see ``handover`` for the command's side), each inside its merchant's
budget beside its tail.

One watcher thread for the process and one query for every merchant held, however many;
each request runs in a thread of its own, on its merchant's client (the same rate budget as
its tail: a backfill at the tail's priority, a verify at the lowest) and fenced by its
merchant's epoch.  A backfill, a resync or a repairing verify registers with the merchant's
one demand (``sync.demand``), so the tail stretches its idle polls for it as for its own
rebuild.  Every kind has the same life: started (``running`` under this replica),
then done with its result, or failed with a reason the command prints.  A request whose
merchant is handed over or stopped mid-way stays ``running``, and the next holder takes it up
(a backfill from its job's windows, a verify from the start, a reset from the note it keeps in
its row).  A pending request past its kind's limit is expired, never started
(``requests.book.START_WITHIN``), as is one whose command is gone (it stopped looking:
``requests.book.FOLLOWED_WITHIN``, logged ``requests_unfollowed``); one cancelled by its
command (interrupted) is stopped at the next look, every ``POLL``.

A bug while looking is logged (its class and frames, never its message) and looked again
after the restart policy's backoff; a bug in one request fails that request, nothing else.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

import orjson
import structlog

from recordsync.core.errors import (
    LeaseSupersededError,
    LeaseUnconfirmedError,
    RecordSyncError,
    ShutdownRequestedError,
)
from recordsync.core.settings import DEFAULT_FLEET_TICK
from recordsync.core.state import REBUILD_JOB, SyncState
from recordsync.core.stopping import Stopper
from recordsync.metrics import Metrics
from recordsync.service.daemon.observers import SyncMetricsObserver
from recordsync.service.runtime import MerchantSync
from recordsync.sync.anchor import reset_plan
from recordsync.sync.comparison import verify_document
from recordsync.sync.engine import SyncEngine
from recordsync.sync.events import SyncObserver
from recordsync.sync.resilience import StepRunner
from recordsync.sync.verify import verify_range
from recordsync.warehouse import HolderRequest, RequestKind, Warehouse
from recordsync.warehouse.requests.book import unfollowed_reason

log = structlog.get_logger("recordsync")

POLL: Final = DEFAULT_FLEET_TICK  # seconds between looks for requests (the daemon's: a tick)
RESET_LOOK_EVERY: Final = 0.5  # seconds between looks for the new anchor of a reset
# A reset asks the merchant's engine to end its generation (the pages in hand committed) and
# anchor anew: seconds.  Past this, the request fails rather than being followed for ever.
RESET_WITHIN: Final = 120.0
_ENDS: Final = ("started", "finished", "failed")


class HeldMerchant(Protocol):
    """A merchant this process syncs, as its requests need it (``merchant_syncs``)."""

    merchant_id: str
    epoch: int
    stopper: Stopper  # stopped when the merchant is handed over
    # Its tail's sync: the client (so the budget), the options, the demand its jobs register
    # with, the engine a reset asks to rebuild; None until built (and while it restarts).
    sync: MerchantSync | None
    requests: set[int]  # the requests running for it here


# What a kind does, stopping with the ``Stopper`` (its merchant handed over, or the request
# cancelled): (the result handed back, fields for the log), or None once stopped.
Work = Callable[[HeldMerchant, HolderRequest, Stopper], tuple[str | None, dict[str, Any]] | None]


class RequestedWork:
    def __init__(
        self,
        *,
        warehouse: Warehouse,
        replica_id: str,
        metrics: Metrics,
        stopper: Stopper,
        held: Callable[[], Mapping[str, HeldMerchant]],
        backoff: Callable[[int], float],
        poll: float = POLL,
        failure_site: Callable[[BaseException], str],
    ) -> None:
        """``held()``: the merchants whose sync runs here with its client built; ``backoff(n)``
        the pause after the ``n``-th failed look in a row."""
        self._warehouse = warehouse
        self._replica_id = replica_id
        self._metrics = metrics
        self._stopper = stopper
        self._held = held
        self._backoff = backoff
        self._poll = poll
        self._failure_site = failure_site
        self._work: dict[RequestKind, Work] = {
            RequestKind.BACKFILL: self._backfill,
            RequestKind.RESYNC: self._backfill,
            RequestKind.VERIFY: self._verify,
            RequestKind.RESET: self._reset,
        }
        self._watcher: threading.Thread | None = None
        self._lock = threading.Lock()
        # request id -> (its merchant, its stopper), while it runs here
        self._running: dict[int, tuple[str, Stopper]] = {}

    def watch(self) -> None:
        """Start the process's one watcher, unless it runs already."""
        with self._lock:
            if self._watcher is not None:
                return
            self._watcher = threading.Thread(
                target=self._watch, name="holder-requests", daemon=True
            )
        self._watcher.start()

    def _watch(self) -> None:
        runner = StepRunner(stopper=self._stopper, observer=SyncObserver(), fatal_is_final=False)
        failures = 0
        try:
            while not self._stopper.stopped:
                try:
                    self.take_up(runner)
                except ShutdownRequestedError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a bug: look again later
                    failures += 1
                    delay = self._backoff(failures)
                    log.error(  # noqa: TRY400 - class and frames, never the message
                        "requests_watch_failed",
                        kind=type(exc).__name__,
                        where=self._failure_site(exc),
                        failures=failures,
                        retry_in_seconds=round(delay, 1),
                    )
                else:
                    failures, delay = 0, self._poll
                self._stopper.sleep(delay)
        except ShutdownRequestedError:
            return

    def take_up(self, runner: StepRunner) -> None:
        """Start a thread for every unfinished request of the merchants held here that does
        not run here yet; fail what a previous version's command asked of them."""
        ready = {
            merchant_id: merchant
            for merchant_id, merchant in self._held().items()
            if merchant.sync is not None and not merchant.stopper.stopped
        }
        held = tuple(ready)
        if not held:
            return
        requests = self._warehouse.requests
        failed = runner.run(lambda: requests.fail_previous(held), what="answer previous requests")
        if failed:
            log.warning("previous_requests_failed", requests=failed)
        expired = runner.run(lambda: requests.expire(held), what="expire requests")
        gone = [(r.id, r.kind.value) for r in expired if r.error == unfollowed_reason()]
        if gone:  # killed while its request waited: never run for nobody
            log.warning("requests_unfollowed", requests=gone)
        late = [(r.id, r.kind.value) for r in expired if r.error != unfollowed_reason()]
        if late:
            log.warning("requests_expired", requests=late)
        unfinished = runner.run(lambda: requests.unfinished(held), what="read requests")
        listed = {request.id for request in unfinished}
        with self._lock:
            # Running here, no longer unfinished: cancelled by its command (or failed by it).
            ended = [
                stopper
                for rid, (merchant_id, stopper) in self._running.items()
                if merchant_id in ready and rid not in listed
            ]
        for stopper in ended:
            stopper.stop()
        for request in to_start(
            unfinished, running=lambda r: r.id in ready[r.merchant_id].requests
        ):
            merchant = ready[request.merchant_id]
            merchant.requests.add(request.id)
            with self._lock:
                self._running[request.id] = (merchant.merchant_id, Stopper(parent=merchant.stopper))
            threading.Thread(
                target=self._run,
                args=(merchant, request),
                name=f"{request.kind.value}-{request.id}",
                daemon=True,
            ).start()

    def _run(self, merchant: HeldMerchant, request: HolderRequest) -> None:
        kind = request.kind.value
        bound = log.bind(merchant_id=merchant.merchant_id, request_id=request.id, kind=kind)
        requests = self._warehouse.requests
        with self._lock:
            _merchant_id, stopper = self._running[request.id]
        runner = StepRunner(stopper=stopper, observer=SyncObserver(), fatal_is_final=False)
        # requested_backfill_started, requested_verify_finished, ...: one name per kind.
        started, finished, failed, ended = (
            f"requested_{kind}_{end}" for end in ("started", "finished", "failed", "ended")
        )
        try:
            runner.run(
                lambda: requests.start(request.id, self._replica_id), what=f"start {kind} request"
            )
            bound.info(started, key=request.key, repair=request.repair)
            outcome = self._work[request.kind](merchant, request, stopper)
            if merchant.stopper.stopped:
                return  # handed over or stopping: the next holder takes it up
            if outcome is None or stopper.stopped:
                bound.info(ended, action="cancelled or ended by its command: stopped here")
                return
            result, fields = outcome
            runner.run(
                lambda: requests.finish(request.id, result=result), what=f"finish {kind} request"
            )
            bound.info(finished, **fields)
        except (ShutdownRequestedError, LeaseSupersededError, LeaseUnconfirmedError):
            if not merchant.stopper.stopped:
                bound.info(ended, action="cancelled or ended by its command: stopped here")
            return  # else left running: the next holder takes it up
        except LookupError as exc:  # expired, cancelled, finished, or its command gone
            bound.info(ended, action="ended by its command or expired: not run here", why=str(exc))
        except RecordSyncError as exc:
            bound.error(failed, error=str(exc))
            with contextlib.suppress(RecordSyncError, LookupError):
                requests.finish(request.id, failed=str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug: this request fails, nothing else
            name = type(exc).__name__
            self._metrics.merchant(merchant.merchant_id).sync_failed(name)
            bound.error(failed, error_kind=name, where=self._failure_site(exc))
            with contextlib.suppress(RecordSyncError, LookupError):
                requests.finish(request.id, failed=f"{name} in the holder (a bug: see its log)")
        finally:
            with self._lock:
                self._running.pop(request.id, None)

    # -- the kinds --------------------------------------------------------------------------------

    def _backfill(
        self, merchant: HeldMerchant, request: HolderRequest, stopper: Stopper
    ) -> tuple[str | None, dict[str, Any]] | None:
        """``recordsync backfill`` and ``merchant resync``: the job's windows (the request's
        key), through the usual fenced commits (a takeover resumes them), on an engine built
        from the tail's sync: registered with the merchant's one demand, so the tail gives it
        the budget as to its own rebuild."""
        assert merchant.sync is not None
        engine = merchant.sync.engines.job_engine(
            self._warehouse,
            merchant.epoch,
            stopper=stopper,
            observer=SyncMetricsObserver(self._metrics.merchant(merchant.merchant_id)),
        )
        result = engine.backfill(request.created_from, request.created_to, job=request.key)
        return None, {"records": result.records, "job": result.job}

    def _reset(
        self, merchant: HeldMerchant, request: HolderRequest, stopper: Stopper
    ) -> tuple[str | None, dict[str, Any]] | None:
        """``recordsync merchant reset``: the merchant's engine ends its generation (pages in
        hand committed) and rebuilds, as after an expired change cursor; done once the new
        anchor is committed (``rebuilds`` counted past the count noted in the request when it
        started, so a holder restarted, or the next one, carries the same reset on).  An
        engine built again meanwhile (its sync restarted after an error) is asked again.  The
        new plan goes back as JSON; not re-anchored within ``RESET_WITHIN``: failed."""
        requests = self._warehouse.requests
        runner = StepRunner(stopper=stopper, observer=SyncObserver(), fatal_is_final=False)

        def load() -> SyncState | None:
            return runner.run(
                lambda: self._warehouse.state.load_state(merchant.merchant_id),
                what="read sync state",
            )

        before = _rebuilds_before(request)
        if before is None:
            state = load()
            if state is None:
                raise RecordSyncError(f"merchant {merchant.merchant_id} was never synced")
            before = state.rebuilds
            note = orjson.dumps({"rebuilds_before": before}).decode()
            runner.run(lambda: requests.note(request.id, note), what="note reset")
        asked: SyncEngine | None = None
        deadline = time.monotonic() + RESET_WITHIN
        while True:
            state = load()
            if state is not None and state.rebuilds > before:
                break
            engine = None if merchant.sync is None else merchant.sync.engine
            if engine is not None and engine is not asked:
                engine.request_rebuild()
                asked = engine
            if time.monotonic() > deadline:
                raise RecordSyncError(
                    f"the holder's sync of merchant {merchant.merchant_id} did not re-anchor "
                    f"within {RESET_WITHIN:.0f} s (its log says why); run the reset again"
                )
            stopper.sleep(RESET_LOOK_EVERY)
        windows = self._warehouse.state.load_windows(merchant.merchant_id, REBUILD_JOB)
        plan = reset_plan(state, len(windows))
        return orjson.dumps(plan).decode(), plan

    def _verify(
        self, merchant: HeldMerchant, request: HolderRequest, stopper: Stopper
    ) -> tuple[str | None, dict[str, Any]] | None:
        """``recordsync verify``: the same ``verify_range`` as the command's, at the lowest
        priority, repairs fenced by this holder's epoch (a repair registered with the
        merchant's demand); the findings go back as JSON."""
        assert merchant.sync is not None
        sync = merchant.sync.engines
        result = verify_range(
            sync.client,
            self._warehouse.fenced(merchant.merchant_id, merchant.epoch),
            request.created_from,
            request.created_to,
            page_size=sync.options.page_size,
            repair=request.repair,
            stopper=stopper,
            demand=sync.demand,
        )
        document = verify_document(
            result, merchant.merchant_id, request.created_from, request.created_to
        )
        return orjson.dumps(document).decode(), {"clean": result.clean, "repaired": result.repaired}


def _rebuilds_before(request: HolderRequest) -> int | None:
    """The rebuild count a reset noted when it started (``_reset``), or None."""
    if request.result is None:
        return None
    with contextlib.suppress(orjson.JSONDecodeError):
        noted = orjson.loads(request.result)
        if isinstance(noted, dict) and isinstance(noted.get("rebuilds_before"), int):
            return int(noted["rebuilds_before"])
    return None


def to_start(
    unfinished: Sequence[HolderRequest], *, running: Callable[[HolderRequest], bool]
) -> list[HolderRequest]:
    """The requests to start now, oldest first: those not running here yet, and of several
    asking for the same work (a kind and key: a backfill's job asked by two commands at once)
    only the oldest; the others wait for it to finish, then find its windows done."""
    first_of: dict[tuple[str, RequestKind, str], int] = {}
    for request in unfinished:
        if request.key is not None:
            first_of.setdefault((request.merchant_id, request.kind, request.key), request.id)
    return [
        request
        for request in unfinished
        if not running(request)
        and (
            request.key is None
            or first_of[(request.merchant_id, request.kind, request.key)] == request.id
        )
    ]
