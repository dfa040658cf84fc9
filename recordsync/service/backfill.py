"""``recordsync backfill``: a one-shot snapshot of a creation range, resumable, beside the tail.

A merchant's rate limit is spent by one process at a time.  So the backfill first tries to
take the merchant's lease: when no daemon holds the merchant, it runs here, fenced by its own
epoch, and a daemon starting meanwhile waits for it.  When a daemon holds it, the job is
handed to that holder through the warehouse (a ``backfill_requests`` row the holder runs
inside its own budget, beside its tail) and this command follows the job's windows until the
holder says it is done; a new holder resumes it should the holder change.  Should the
merchant be left with no holder at all (the daemons stopped, a rollout scaled to zero), the
command takes the lease back while it follows and runs the rest of the job here: following
never waits on nobody.
"""

from __future__ import annotations

import contextlib
import os
import secrets as random_tokens
import sys
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime

import structlog

from recordsync.core.errors import (
    ConfigurationError,
    RecordSyncError,
    ShutdownRequestedError,
)
from recordsync.core.settings import Settings
from recordsync.core.state import backfill_job
from recordsync.core.stopping import Stopper
from recordsync.logs import process_context
from recordsync.service.app import App, open_app
from recordsync.service.progress import RichProgress
from recordsync.service.signals import Received, stop_on_signals
from recordsync.sync.engine import BackfillResult
from recordsync.sync.events import SyncObserver
from recordsync.sync.plan import plan_windows
from recordsync.sync.resilience import StepRunner
from recordsync.warehouse import BackfillState

log = structlog.get_logger("recordsync")

LEASE_SECONDS = 10
FOLLOW_EVERY = 1.0


def run_backfill(
    settings: Settings, start: datetime, end: datetime, *, merchant_id: str | None = None
) -> int:
    """One-shot snapshot of a range of ``merchant_id`` (needed when several are configured):
    a progress bar on a terminal, log lines otherwise.  The secret is read once."""
    merchant = settings.merchant(merchant_id)
    stopper = Stopper()
    process_context.update(merchant_id=merchant.merchant_id, phase="backfill")
    progress = RichProgress() if sys.stdout.isatty() else None
    # Where the job runs decides what an interruption leaves behind (issue 29).
    handed_over: list[int] = []  # the request a daemon runs, while this command follows it
    try:
        with (
            stop_on_signals(stopper) as signals,
            open_app(
                settings, merchant_id=merchant.merchant_id, stopper=stopper, observer=progress
            ) as app,
            progress or nullcontext(),
        ):
            if not start < end:
                raise ConfigurationError("backfill: --from must be earlier than --to")
            me = f"backfill-{os.getpid()}-{random_tokens.token_hex(2)}"
            session = app.warehouse.fleet_session(me, lease_seconds=LEASE_SECONDS)
            try:
                epoch = session.try_hold(merchant.merchant_id)
                request_id = None
                if epoch is None:
                    taken = _follow_the_holder(
                        app,
                        start,
                        end,
                        stopper,
                        progress,
                        try_hold=lambda: session.try_hold(merchant.merchant_id),
                        handed_over=handed_over,
                    )
                    if taken is None:
                        return 0
                    handed_over.clear()
                    request_id, epoch = taken
                # Its lease is kept alive by the session's keeper for the whole run; nothing is
                # sent once it is not confirmed (issue 30).
                app.client.hold_under(lambda: session.confirmed(merchant.merchant_id))
                result = _run_here(
                    app, stopper, start, end, epoch=epoch, request_id=request_id, me=me
                )
            finally:
                session.close()
    except ShutdownRequestedError:
        _interrupted(signals, handed_over)
        raise
    if stopper.stopped:
        log.info("backfill_stopped", job=result.job, records=result.records)
        _interrupted(signals, handed_over)
        raise RecordSyncError("backfill stopped before it finished")
    log.info("backfill_finished", job=result.job, windows=result.windows, records=result.records)
    return 0


def _interrupted(signals: Received, handed_over: list[int]) -> None:
    """Raise the interruption with what becomes of the job: a daemon carries a job handed to
    it on; a job run here keeps its finished windows for the same command to resume."""
    if handed_over:
        what_now = (
            f"the daemon holding the merchant carries on with the job (request {handed_over[0]});"
            " nothing is lost by stopping to follow it"
        )
    else:
        what_now = "the windows finished so far are kept; run the same command again to resume"
    error = signals.interrupted(what_now)
    if error is not None:
        log.info("backfill_interrupted", action=what_now)
        raise error


def _run_here(
    app: App,
    stopper: Stopper,
    start: datetime,
    end: datetime,
    *,
    epoch: int,
    request_id: int | None,
    me: str,
) -> BackfillResult:
    """The job in this process, under ``epoch``; a request taken back is marked running here,
    then done or failed (an interrupted one stays running, for the next holder to resume)."""
    if request_id is None:
        return app.engine_for(stopper, epoch=epoch).backfill(start, end)
    with contextlib.suppress(LookupError):  # a holder finished it just before it left
        app.warehouse.start_backfill_request(request_id, me)
    try:
        result = app.engine_for(stopper, epoch=epoch).backfill(start, end)
    except RecordSyncError as exc:
        with contextlib.suppress(LookupError, RecordSyncError):
            app.warehouse.finish_backfill_request(request_id, failed=str(exc))
        raise
    if not stopper.stopped:
        with contextlib.suppress(LookupError):
            app.warehouse.finish_backfill_request(request_id)
    return result


def _follow_the_holder(
    app: App,
    start: datetime,
    end: datetime,
    stopper: Stopper,
    progress: SyncObserver | None,
    *,
    try_hold: Callable[[], int | None],
    handed_over: list[int],
) -> tuple[int, int] | None:
    """Hand the job to the daemon that holds the merchant and follow it to its end: None once
    the holder finished it, or (the request, an epoch) once nobody held the merchant any more
    and this command took its lease back (``backfill_taken_back``)."""
    merchant_id = app.merchant.merchant_id
    job = backfill_job(start, end)
    runner = StepRunner(stopper=stopper, observer=SyncObserver(), fatal_is_final=True)
    request_id = runner.run(
        lambda: app.warehouse.request_backfill(merchant_id, start, end, job),
        what="request backfill",
    )
    total = len(plan_windows(start, end))
    handed_over.append(request_id)
    log.info("backfill_handed_over", request_id=request_id, job=job, windows=total)
    if progress is not None:
        progress.windows_planned(job, total, 0)
    done_before = 0
    while True:
        request = runner.run(lambda: app.warehouse.backfill_request(request_id), what="follow")
        windows = runner.run(
            lambda: app.warehouse.load_windows(merchant_id, job), what="follow backfill"
        )
        done = sum(1 for window in windows if window.done)
        if progress is not None and windows and len(windows) != total:
            # The holder planned its own windows, or cut some for more chains as it read.
            total = len(windows)
            progress.windows_planned(job, total, done)
        elif progress is not None:
            for window in windows[done_before:done]:
                progress.window_page(job, window.window, 0, done=True)
        done_before = max(done_before, done)
        if request is None or request.state is BackfillState.FAILED:
            reason = "the request disappeared" if request is None else request.error
            raise RecordSyncError(f"backfill {job} failed at its holder: {reason}")
        if request.state is BackfillState.DONE:
            records = sum(window.records for window in windows)
            log.info(
                "backfill_finished",
                job=job,
                windows=len(windows),
                records=records,
                holder=request.holder,
            )
            return None
        # A holder runs the request under the merchant's lock: the lock free means nobody runs
        # it, and nobody will until a daemon takes the merchant; this command does it now.
        epoch = runner.run(try_hold, what="take the lease")
        if epoch is not None:
            log.info("backfill_taken_back", request_id=request_id, windows_done=done)
            return request_id, epoch
        stopper.sleep(FOLLOW_EVERY)
