"""Whether a job of the merchant wants the rate budget now: what stretches the tail's idle
polls and spaces its wake-ups (``tail_pace``).

One demand per merchant in a process, shared by every engine of the merchant (its tail's, a
job's handed over to its holder, a command's): a job that registered with an engine's own
demand, which the tail never sees, left the tail polling at its interval beside a handed-over
backfill.  Whoever holds the merchant owns it (``service.runtime.MerchantSync``).

Every job that reads windows (the rebuild's snapshot, a backfill, a resync, a repairing
verify) is registered here while it runs; the tail asks before each wait.  A job counts until
its last worker ends or its generation stops, so a job that was stopped before its workers
ever ran cannot hold the tail's polls stretched.  The listeners (the tail's wake-ups, while
it follows) are told when a job starts or ends, so that the tail's wait is reconsidered at
once: when a backfill ends, a tail stretched to its ceiling comes back to its interval
without waiting the ceiling out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from recordsync.core.stopping import Stopper


class _Job(Protocol):
    @property
    def wants_budget(self) -> bool: ...


class SnapshotDemand:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: list[_Job] = []
        self._listeners: list[Callable[[], None]] = []

    def add(self, job: _Job) -> None:
        with self._lock:
            self._jobs.append(job)
        self.changed()

    @property
    def running(self) -> bool:
        with self._lock:
            self._jobs = [job for job in self._jobs if job.wants_budget]
            return bool(self._jobs)

    def changed(self) -> None:
        """A job started or ended: whoever waits on the demand looks again."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    @contextmanager
    def listening(self, listener: Callable[[], None]) -> Iterator[None]:
        """``listener`` is told of every change while the block runs (the tail's wake-ups,
        for as long as that tail follows: an engine that failed leaves no listener behind)."""
        with self._lock:
            self._listeners.append(listener)
        try:
            yield
        finally:
            with self._lock:
                self._listeners.remove(listener)

    @contextmanager
    def reading(self, stopper: Stopper) -> Iterator[None]:
        """A job read in the caller's thread (a repairing verify), wanting the budget while
        the block runs and ``stopper`` has not stopped."""
        job = _Block(stopper)
        self.add(job)
        try:
            yield
        finally:
            job.ended = True
            self.changed()


class _Block:
    def __init__(self, stopper: Stopper) -> None:
        self._stopper = stopper
        self.ended = False

    @property
    def wants_budget(self) -> bool:
        return not self.ended and not self._stopper.stopped
