"""The job runner: the sync's background work runs as APScheduler jobs, each with one
instance and coalescing.

Each snapshot worker is a job, and so are the periodic checks (the drift check at the lowest
budget priority, the cross-check, the game catalogue).  The tail is not: it runs in the
engine's own thread (``tail.follow_tail``), where nothing else can take its place.

Every merchant's jobs may share one ``JobHost``: one scheduler thread and two bounded pools,
``periodic`` for the short runs of the checks, ``workers`` for the snapshot workers that read
window after window.  So the threads of a process that syncs fifty merchants are bounded by
the pools' sizes, not multiplied by the merchants, and a long backfill of one merchant can
never starve another.  A job never waits out a failure on those threads: it runs under
``core.waiting.no_waiting()``, raises ``Deferred`` where it would wait, and is scheduled again
for when the wait is over (``Jobs``), so the pools hold only work that is running (eight
catalogue refreshes sleeping out a 404 once held all eight threads).  A ``Jobs`` is one
generation of one engine's jobs on a host (its own private host when none is given, as for a
one-shot backfill): started together, stopped together, failures surfaced to the thread that
waits.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Final

import structlog
from apscheduler.events import EVENT_JOB_ERROR, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from recordsync.core.errors import (
    RecordSyncError,
    RetryableError,
    ShutdownRequestedError,
    WarehouseUnavailableError,
)
from recordsync.core.stopping import Stopper
from recordsync.core.waiting import Deferred, no_waiting

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
        self.periodic_threads = periodic_threads
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
            repeats=True,
            trigger=IntervalTrigger(seconds=seconds, timezone=UTC),
            **first_run,
        )

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The jobs run while the block does (the tail, in the caller's thread); then the
        generation stops, its jobs in hand finish, and a job's failure is raised here."""
        self.host.start()
        try:
            yield
        finally:
            self.stopper.stop()
            self._close()
        if self.failures:
            raise self.failures[0]

    def run_until_stopped(self, done: threading.Event | None = None) -> None:
        """Run the jobs until the stopper stops (or ``done`` is set), jobs finished."""
        # Without ``done`` only the stopper ends the wait (a failure stops it too): no need
        # to wake up, which fifty merchants' engines would otherwise do 250 times a second.
        period = 0.2 if done is not None else 60.0
        with self.running():
            while not self.stopper.wait(period):
                if done is not None and done.is_set():
                    break

    def _add(
        self,
        job_id: str,
        func: Callable[[], None],
        *,
        executor: str,
        repeats: bool = False,
        **options: object,
    ) -> None:
        full_id = f"{self._prefix}:{job_id}"
        scheduler = self.host.scheduler

        def again(seconds: float) -> None:
            """Run the job once more in ``seconds`` (a periodic one then follows its trigger
            from there), unless the generation ended meanwhile."""
            at = datetime.now(UTC) + timedelta(seconds=seconds)
            with self._idle:
                if self._closed:
                    return
                if repeats:
                    with contextlib.suppress(JobLookupError):
                        scheduler.modify_job(full_id, next_run_time=at)
                else:
                    # A one-off job is gone from the scheduler once it started: add it again.
                    scheduler.add_job(
                        run,
                        id=full_id,
                        name=full_id,
                        executor=executor,
                        next_run_time=at,
                        replace_existing=True,
                    )

        run = self._tracked(deferring(full_id, quiet(func), again))
        self.host.own(full_id, self)
        self._ids.append(full_id)
        scheduler.add_job(run, id=full_id, name=full_id, executor=executor, **options)

    def _tracked(self, func: Callable[[], None]) -> Callable[[], None]:
        """Counts the runs in progress, so the generation ends only after its last one; a run
        that starts after the generation closed (it waited in a full pool) does nothing.

        An exception escaping the run is handed to the generation here (it stops, and the
        waiting thread raises it), never to APScheduler: its listener would print the
        traceback on stderr, once per snapshot worker, before the command's one line (issue
        29: a wrong secret made ``backfill`` print 160 lines).  Our own errors carry their
        diagnosis and are reported by the waiting thread; anything else is a bug, logged once
        here with its traceback as a field of the JSON line.
        """

        def job() -> None:
            with self._idle:
                if self._closed:
                    return
                self._active += 1
            try:
                func()
            except Exception as exc:  # handed to the generation, raised in its waiting thread
                self.failed(exc)
                if not isinstance(exc, RecordSyncError):
                    # Rendering a traceback must never replace the failure it reports.
                    with contextlib.suppress(Exception):
                        log.exception("job_crashed", kind=type(exc).__name__)
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


def deferring(
    job_id: str, func: Callable[[], None], again: Callable[[float], None]
) -> Callable[[], None]:
    """One run without waits (``core.waiting``): a run that would wait is scheduled again by
    ``again`` for when the wait is over, and its thread goes back to the pool at once."""

    def job() -> None:
        try:
            with no_waiting():
                func()
        except Deferred as later:
            log.debug("job_deferred", job=job_id, seconds=round(later.seconds, 3), why=later.reason)
            again(later.seconds)

    return job


def quiet(func: Callable[[], None]) -> Callable[[], None]:
    """A stop unwinds a job quietly; anything else reaches the scheduler's error listener."""

    def job() -> None:
        try:
            func()
        except ShutdownRequestedError:
            return

    return job
