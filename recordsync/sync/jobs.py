"""The job runner: the sync's work runs as APScheduler jobs, each with one instance and
coalescing.

The tail drains its backlog on an interval of ``poll_interval`` (a run that outlasts the
interval is never doubled), each snapshot worker is a job, and the drift check is a periodic
job at the lowest budget priority.

Every merchant's jobs may share one ``JobHost``: one scheduler thread and two bounded pools,
``periodic`` for the short runs of the tail and the checks, ``workers`` for the snapshot
workers that read window after window.  So the threads of a process that syncs fifty
merchants are bounded by the pools' sizes, not multiplied by the merchants, and a long
backfill of one merchant can never starve another's tail.  A ``Jobs`` is one generation of
one engine's jobs on a host (its own private host when none is given, as for a one-shot
backfill): started together, stopped together, failures surfaced to the thread that waits.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

import structlog
from apscheduler.events import EVENT_JOB_ERROR, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from recordsync.core.errors import (
    RetryableError,
    ShutdownRequestedError,
    WarehouseUnavailableError,
)
from recordsync.core.stopping import Stopper

log = structlog.get_logger("recordsync.sync")

PERIODIC: Final = "periodic"
WORKERS: Final = "workers"
DEFAULT_PERIODIC_THREADS: Final = 8
DEFAULT_WORKER_THREADS: Final = 16


class JobHost:
    """The scheduler and the bounded thread pools that every ``Jobs`` placed on it shares."""

    def __init__(
        self,
        *,
        periodic_threads: int = DEFAULT_PERIODIC_THREADS,
        worker_threads: int = DEFAULT_WORKER_THREADS,
    ) -> None:
        self.scheduler = BackgroundScheduler(
            executors={
                PERIODIC: ThreadPoolExecutor(max_workers=periodic_threads),
                WORKERS: ThreadPoolExecutor(max_workers=worker_threads),
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=UTC,
        )
        self.scheduler.add_listener(self._failed, EVENT_JOB_ERROR)
        self.worker_threads = worker_threads
        self._owners: dict[str, Jobs] = {}
        self._lock = threading.Lock()
        self._generations = itertools.count(1)
        self._started = False

    def start(self) -> None:
        with self._lock:
            if not self._started:
                self.scheduler.start()
                self._started = True

    def shutdown(self) -> None:
        """Stop the scheduler after the jobs in hand finish; safe twice."""
        with self._lock:
            started, self._started = self._started, False
        if started:
            self.scheduler.shutdown(wait=True)

    def next_prefix(self) -> str:
        return f"g{next(self._generations)}"

    def own(self, job_id: str, owner: Jobs) -> None:
        with self._lock:
            self._owners[job_id] = owner

    def disown(self, job_id: str) -> None:
        with self._lock:
            self._owners.pop(job_id, None)

    def _failed(self, event: JobExecutionEvent) -> None:
        with self._lock:
            owner = self._owners.get(event.job_id)
        if owner is not None:
            owner.failed(event.exception)


class Jobs:
    """One generation's jobs on a host: one instance each, errors surfaced.

    An exception escaping a job (a bug, or a fatal error in a one-shot backfill) stops the
    generation and is raised again in the thread that waits, so nothing fails silently in
    a worker thread while the daemon looks alive.
    """

    def __init__(self, stopper: Stopper, workers: int, host: JobHost | None = None) -> None:
        """``workers``: the snapshot workers a private host (``host=None``) is sized for."""
        self.stopper = stopper
        self.failures: list[BaseException] = []
        self._private = host is None
        self.host = host or JobHost(periodic_threads=3, worker_threads=max(workers, 1))
        self._prefix = self.host.next_prefix()
        self._ids: list[str] = []
        self._active = 0
        self._idle = threading.Condition()
        self._closed = False

    def failed(self, exception: BaseException | None) -> None:
        if exception is not None:
            self.failures.append(exception)
        self.stopper.stop()

    def once(self, job_id: str, func: Callable[[], None]) -> None:
        """A long-running job (a snapshot worker) on the host's bounded worker pool."""
        self._add(job_id, func, executor=WORKERS, next_run_time=datetime.now(UTC))

    def every(self, job_id: str, seconds: float, func: Callable[[], None], *, now: bool) -> None:
        """A periodic job; an outage escaping one run is logged and the next run tries again
        (its steps already wait outages out through the runner: this is the backstop)."""
        # APScheduler reads next_run_time=None as "paused": leave it out to follow the trigger.
        first_run = {"next_run_time": datetime.now(UTC)} if now else {}
        self._add(
            job_id,
            periodic(job_id, func),
            executor=PERIODIC,
            trigger=IntervalTrigger(seconds=seconds, timezone=UTC),
            **first_run,
        )

    def wake(self, job_id: str) -> None:
        """Run a periodic job now instead of at its next interval (a notification came)."""
        with contextlib.suppress(JobLookupError):  # the generation ended meanwhile
            self.host.scheduler.modify_job(
                f"{self._prefix}:{job_id}", next_run_time=datetime.now(UTC)
            )

    def run_until_stopped(self, done: threading.Event | None = None) -> None:
        """Start the jobs; return when the stopper stops (or ``done`` is set), jobs finished."""
        self.host.start()
        # Without ``done`` only the stopper ends the wait (a failure stops it too): no need
        # to wake up, which fifty merchants' engines would otherwise do 250 times a second.
        period = 0.2 if done is not None else 60.0
        try:
            while not self.stopper.wait(period):
                if done is not None and done.is_set():
                    break
        finally:
            self.stopper.stop()
            self._close()
        if self.failures:
            raise self.failures[0]

    def _add(
        self, job_id: str, func: Callable[[], None], *, executor: str, **options: object
    ) -> None:
        full_id = f"{self._prefix}:{job_id}"
        self.host.own(full_id, self)
        self._ids.append(full_id)
        self.host.scheduler.add_job(
            self._tracked(quiet(func)), id=full_id, name=full_id, executor=executor, **options
        )

    def _tracked(self, func: Callable[[], None]) -> Callable[[], None]:
        """Counts the runs in progress, so the generation ends only after its last one; a run
        that starts after the generation closed (it waited in a full pool) does nothing."""

        def job() -> None:
            with self._idle:
                if self._closed:
                    return
                self._active += 1
            try:
                func()
            finally:
                with self._idle:
                    self._active -= 1
                    self._idle.notify_all()

        return job

    def _close(self) -> None:
        with self._idle:
            self._closed = True
        for full_id in self._ids:
            # A one-off job that already ran is gone by itself.
            with contextlib.suppress(JobLookupError):
                self.host.scheduler.remove_job(full_id)
        with self._idle:
            while self._active:
                self._idle.wait()
        for full_id in self._ids:
            self.host.disown(full_id)
        if self._private:
            self.host.shutdown()


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
