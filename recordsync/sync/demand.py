"""Whether a snapshot of the merchant wants the rate budget now: what stretches the tail's
idle polls and spaces its wake-ups (``tail_pace``).

Every job that reads windows (the rebuild's snapshot, a backfill, a resync) is registered
here while its workers run; the tail asks before each wait.  A job counts until its last
worker ends or its generation stops, so a job that was stopped before its workers ever ran
cannot hold the tail's polls stretched.  ``on_change`` (the tail's wake-ups) is told when a
job starts or ends, so that the tail's wait is reconsidered at once: when a backfill ends,
a tail stretched to its ceiling comes back to its interval without waiting the ceiling out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol


class _Job(Protocol):
    @property
    def wants_budget(self) -> bool: ...


class SnapshotDemand:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: list[_Job] = []
        self.on_change: Callable[[], None] | None = None

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
        listener = self.on_change
        if listener is not None:
            listener()
