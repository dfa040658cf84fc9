"""``recordsync backfill``: a one-shot snapshot of a creation range, resumable, beside the tail.

A merchant's rate limit is spent by one process at a time, and its tail is a daemon's. So the
job goes where ``commands.handover`` says: run here under the command's own lease only while no
live daemon is configured with the merchant (and handed to the first that appears, the rest
of the job resumed there from its windows), otherwise handed to the merchant's holder as a
``sync_requests`` row the holder runs inside its own budget, beside its tail, while this
command follows the job's windows until the holder says it is done; a new holder resumes it
should the holder change.  Interrupted, a backfill is carried on by the daemon (whoever runs
the same range next follows it); a resync's request is cancelled.  Run here, it obeys a pause
within a tick (``pause_watch``): it stops, the windows finished kept, and says so in its last
line (exit 1).
"""

from __future__ import annotations

import contextlib
import secrets as random_tokens
import sys
from contextlib import nullcontext
from datetime import datetime

import structlog

from recordsync.core.errors import (
    ConfigurationError,
    RecordSyncError,
    ShutdownRequestedError,
)
from recordsync.core.settings import Settings
from recordsync.core.state import WindowProgress, backfill_job, resync_job
from recordsync.core.stopping import Stopper
from recordsync.logs import json_lines, process_context
from recordsync.service.commands.handover import DoneThere, Handover, HeldHere
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.service.commands.pause_watch import PauseWatch, refuse_before_any_request
from recordsync.service.commands.progress import RichProgress
from recordsync.service.signals import Received, stop_on_signals
from recordsync.sync.engine import BackfillResult
from recordsync.sync.events import SyncObserver
from recordsync.sync.plan import plan_windows
from recordsync.sync.resilience import StepRunner
from recordsync.warehouse import HolderRequest, RequestKind

log = structlog.get_logger("recordsync")


def run_backfill(
    settings: Settings, start: datetime, end: datetime, *, merchant_id: str | None = None
) -> int:
    """One-shot snapshot of a range of ``merchant_id`` (needed when several are configured):
    a progress bar on a terminal, log lines otherwise.  The secret is read once.  Run again,
    it resumes the same job (its windows keep the progress)."""
    return run_range_job(settings, start, end, RequestKind.BACKFILL, merchant_id=merchant_id)


def run_resync(settings: Settings, merchant_id: str, start: datetime, end: datetime) -> int:
    """``recordsync merchant resync``: read ``[start, end)`` again from the platform, as a
    job of its own, through the holder when there is one; nothing is emptied, and the highest
    revision wins, so dashboards stay whole meanwhile."""
    return run_range_job(settings, start, end, RequestKind.RESYNC, merchant_id=merchant_id)


def run_range_job(
    settings: Settings,
    start: datetime,
    end: datetime,
    kind: RequestKind,
    *,
    merchant_id: str | None = None,
) -> int:
    """A range read into the warehouse beside the tail (a backfill, a resync), here or at the
    merchant's holder (``commands.handover``)."""
    merchant = settings.merchant(merchant_id)
    stopper = Stopper()
    name = kind.value  # backfill_handed_over, resync_finished, ...: the events name the kind
    process_context.update(merchant_id=merchant.merchant_id, phase=name)
    progress = RichProgress() if sys.stdout.isatty() else None
    handover: Handover | None = None  # what an interruption leaves behind depends on it
    watches: list[PauseWatch] = []  # once the job runs here
    refuse_before_any_request(settings.database_url, merchant.merchant_id, what=name)
    try:
        with (
            stop_on_signals(stopper) as signals,
            MerchantCommand(
                settings,
                merchant.merchant_id,
                stopper,
                name=name,
                observer=progress,
                migrate=kind is RequestKind.BACKFILL,  # a resync is a control command
            ) as command,
            progress or nullcontext(),
        ):
            if not start < end:
                raise ConfigurationError(f"{name}: --from must be earlier than --to")
            job = (
                backfill_job(start, end)
                if kind is RequestKind.BACKFILL
                else resync_job(start, end, random_tokens.token_hex(4))
            )
            follower = _Follower(command, job, start, end, progress=progress, name=name)
            handover = command.hand_over(
                kind,
                ask=lambda: command.warehouse.requests.ask(
                    command.merchant_id, kind, start, end, key=job
                ),
                what=name,
                handed_over=follower.handed_over,
                progress=follower,
            )

            def here(held: HeldHere, work: Stopper) -> BackfillResult:
                # Held here, it obeys a pause as a daemon would: within a tick.
                watch = PauseWatch(
                    command.warehouse.controls.paused,
                    command.merchant_id,
                    stopper,
                    look_every=command.settings.fleet_tick,
                )
                watches.append(watch)
                with watch:
                    return _run_here(command, held, work, start, end, job=job)

            outcome = handover.run(here)
            if isinstance(outcome, DoneThere):
                follower.finished(outcome.request)
                _say_done(
                    merchant.merchant_id,
                    name,
                    start,
                    end,
                    records=follower.records,
                    windows=len(follower.windows),
                    where=f"at replica {outcome.request.holder}",
                    plain=not json_lines(settings.log_format),
                )
                return 0
            result = outcome
    except ShutdownRequestedError:
        _interrupted(signals, handover, name)
        _paused(watches, name)
        raise
    stopped, finished = f"{name}_stopped", f"{name}_finished"
    if stopper.stopped:
        log.info(stopped, job=result.job, records=result.records)
        _interrupted(signals, handover, name)
        _paused(watches, name)
        raise RecordSyncError(f"{name} stopped before it finished")
    log.info(finished, job=result.job, windows=result.windows, records=result.records)
    _say_done(
        merchant.merchant_id,
        name,
        start,
        end,
        records=result.records,
        windows=result.windows,
        where="here",
        plain=not json_lines(settings.log_format),
    )
    return 0


def _say_done(
    merchant_id: str,
    name: str,
    start: datetime,
    end: datetime,
    *,
    records: int,
    windows: int,
    where: str,
    plain: bool,
) -> None:
    """The command's last line, for a person; with a JSON log on stdout the ``*_finished``
    event is the last line, and says the same."""
    if not plain:
        return
    print(  # noqa: T201
        f"merchant {merchant_id}: {name} of [{start.isoformat()}, {end.isoformat()}) done "
        f"{where}: {records} records in {windows} windows"
    )


def _interrupted(signals: Received, handover: Handover | None, name: str) -> None:
    """Raise the interruption with what becomes of the job: a backfill handed to a daemon is
    carried on there, a resync's request is cancelled (``Handover.interrupted``); a job run
    here keeps its finished windows for the same command to resume."""
    if not signals.signals:
        return
    what_now = None if handover is None else handover.interrupted()
    if what_now is None:
        what_now = "the windows finished so far are kept; run the same command again to resume"
    error = signals.interrupted(what_now)
    if error is not None:
        interrupted = f"{name}_interrupted"
        log.info(interrupted, action=what_now)
        raise error


def _paused(watches: list[PauseWatch], name: str) -> None:
    """Raise the pause that stopped the job, if one did (exit 1, ``cli.EXIT_FAILURE``)."""
    if not watches:
        return
    error = watches[-1].error(
        name,
        "the windows finished so far are kept; once it is resumed, run the same command "
        "again to resume",
    )
    if error is not None:
        raise error from None


def _run_here(
    command: MerchantCommand,
    held: HeldHere,
    stopper: Stopper,
    start: datetime,
    end: datetime,
    *,
    job: str,
) -> BackfillResult:
    """The job in this process, under ``held.epoch``, until done or ``stopper`` stops (a signal, or
    a daemon appeared: ``Handover``); a request taken back is marked running here, then done
    or failed (one stopped stays running, for the next holder to resume, unless cancelled)."""
    engine = command.engine(held.epoch, stopper)
    if held.taken_back is None:
        return engine.backfill(start, end, job=job)
    request_id = held.taken_back.id
    requests = command.warehouse.requests
    with contextlib.suppress(LookupError):  # a holder finished it just before it left
        requests.start(request_id, command.me)
    try:
        result = engine.backfill(start, end, job=job)
    except RecordSyncError as exc:
        with contextlib.suppress(LookupError, RecordSyncError):
            requests.finish(request_id, failed=str(exc))
        raise
    if not stopper.stopped:
        with contextlib.suppress(LookupError):
            requests.finish(request_id)
    return result


class _Follower:
    """What the command shows while the holder runs its job: the job's windows as they are
    done (a progress bar on a terminal), then the holder's totals."""

    def __init__(
        self,
        command: MerchantCommand,
        job: str,
        start: datetime,
        end: datetime,
        *,
        progress: SyncObserver | None,
        name: str,
    ) -> None:
        self._command = command
        self._name = name
        self._progress = progress
        self.job = job
        self._total = len(plan_windows(start, end))
        self._done_before = 0
        self._windows: list[WindowProgress] = []
        self._runner = StepRunner(
            stopper=command.stopper, observer=SyncObserver(), fatal_is_final=True
        )

    def handed_over(self, request_id: int) -> None:
        handed_over = f"{self._name}_handed_over"
        log.info(handed_over, request_id=request_id, job=self.job, windows=self._total)
        if self._progress is not None:
            self._progress.windows_planned(self.job, self._total, 0)

    def __call__(self, _request: HolderRequest) -> None:
        command = self._command
        self._windows = windows = self._runner.run(
            lambda: command.warehouse.state.load_windows(command.merchant_id, self.job),
            what=f"follow {self._name}",
        )
        done = sum(1 for window in windows if window.done)
        if self._progress is not None and windows and len(windows) != self._total:
            # The holder planned its own windows, or cut some for more chains as it read.
            self._total = len(windows)
            self._progress.windows_planned(self.job, self._total, done)
        elif self._progress is not None:
            for window in windows[self._done_before : done]:
                self._progress.window_page(self.job, window.window, 0, done=True)
        self._done_before = max(self._done_before, done)

    @property
    def windows(self) -> list[WindowProgress]:
        return self._windows

    @property
    def records(self) -> int:
        return sum(window.records for window in self._windows)

    def finished(self, request: HolderRequest) -> None:
        finished = f"{self._name}_finished"
        log.info(
            finished,
            job=self.job,
            windows=len(self._windows),
            records=self.records,
            holder=request.holder,
        )
