"""The job runner: the sync's work runs as APScheduler jobs, each with one instance and
coalescing.

The tail drains its backlog on an interval of ``poll_interval`` (a run that outlasts the
interval is never doubled), each snapshot worker is a job, and the drift check is a periodic
job at the lowest budget priority.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime

import structlog
from apscheduler.events import EVENT_JOB_ERROR, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from recordsync.core.errors import (
    RetryableError,
    ShutdownRequestedError,
    WarehouseUnavailableError,
)
from recordsync.core.stopping import Stopper

log = structlog.get_logger("recordsync.sync")


class Jobs:
    """One generation's APScheduler: jobs with one instance each, errors surfaced.

    An exception escaping a job (a bug, or a fatal error in a one-shot backfill) stops the
    generation and is raised again in the thread that waits, so nothing fails silently in
    a worker thread while the daemon looks alive.
    """

    def __init__(self, stopper: Stopper, workers: int) -> None:
        self.stopper = stopper
        self.failures: list[BaseException] = []
        self.scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=workers)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=UTC,
        )
        self.scheduler.add_listener(self._failed, EVENT_JOB_ERROR)

    def _failed(self, event: JobExecutionEvent) -> None:
        if event.exception is not None:
            self.failures.append(event.exception)
        self.stopper.stop()

    def once(self, job_id: str, func: Callable[[], None]) -> None:
        self.scheduler.add_job(quiet(func), id=job_id, name=job_id, next_run_time=datetime.now(UTC))

    def every(self, job_id: str, seconds: float, func: Callable[[], None], *, now: bool) -> None:
        """A periodic job; an outage escaping one run is logged and the next run tries again
        (its steps already wait outages out through the runner: this is the backstop)."""
        # APScheduler reads next_run_time=None as "paused": leave it out to follow the trigger.
        first_run = {"next_run_time": datetime.now(UTC)} if now else {}
        self.scheduler.add_job(
            quiet(periodic(job_id, func)),
            IntervalTrigger(seconds=seconds, timezone=UTC),
            id=job_id,
            name=job_id,
            **first_run,
        )

    def run_until_stopped(self, done: threading.Event | None = None) -> None:
        """Start the jobs; return when the stopper stops (or ``done`` is set), jobs finished."""
        self.scheduler.start()
        try:
            while not self.stopper.wait(0.2):
                if done is not None and done.is_set():
                    break
        finally:
            self.stopper.stop()
            self.scheduler.shutdown(wait=True)
        if self.failures:
            raise self.failures[0]


def periodic(job_id: str, func: Callable[[], None]) -> Callable[[], None]:
    """One run of a periodic job: an outage (the warehouse or the platform unreachable) ends
    this run, not the daemon; anything else still reaches the error listener."""

    def job() -> None:
        try:
            func()
        except (RetryableError, WarehouseUnavailableError) as exc:
            log.warning(
                "periodic_job_failed",
                job=job_id,
                error=str(exc),
                kind=type(exc).__name__,
                action="tried again at its next run",
            )

    return job


def quiet(func: Callable[[], None]) -> Callable[[], None]:
    """A stop unwinds a job quietly; anything else reaches the scheduler's error listener."""

    def job() -> None:
        try:
            func()
        except ShutdownRequestedError:
            return

    return job
