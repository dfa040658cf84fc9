"""The revision retention job: superseded revisions older than the retention leave
``record_revisions``, a bounded batch at a time (what expires is the warehouse's rule,
``warehouse.revision_retention``).

It runs as a periodic job of the merchant's engine, so only the holder of the merchant's lease
prunes it (never two replicas at once), and its deletes are fenced by the holder's epoch.  A
run works through batches for at most ``RUN_SECONDS`` and gives its periodic thread back;
the next run, ``PERIOD_SECONDS`` later, goes on from where it stopped, so the sweep never holds
a thread or the database for long, and a page commit meets at most one batch's short delete
transaction.  Once a sweep has reached the end of the table the next begins ``SWEEP_SECONDS``
after that one began: at most one sweep an hour, however small the table.  The position lives
in the job: a restart or a takeover starts the sweep again from the beginning, which deletes
nothing twice (the rows are gone) and misses nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Final

from recordsync.core.retention import RevisionKey
from recordsync.sync.context import SyncContext
from recordsync.sync.resilience import StepRunner

PERIOD_SECONDS: Final = 10.0
RUN_SECONDS: Final = 1.0
SWEEP_SECONDS: Final = 3600.0


class RevisionRetention:
    """One merchant's pruning of ``record_revisions``; ``runner`` is the job's own (a
    warehouse outage is waited out or deferred like any step)."""

    def __init__(
        self,
        ctx: SyncContext,
        runner: StepRunner,
        retention: timedelta,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ctx = ctx
        self._runner = runner
        self._retention = retention
        self._clock = clock
        self._position: RevisionKey | None = None
        self._sweep_began: float | None = None  # None: between sweeps
        self._next_sweep = clock()
        self._deleted = 0  # this sweep's, for its log line
        self._scanned = 0

    def run(self) -> None:
        """Batches of the sweep for at most ``RUN_SECONDS``; a new sweep when one is due."""
        ctx, now = self._ctx, self._clock()
        if self._sweep_began is None:
            if now < self._next_sweep:
                return
            self._sweep_began, self._position = now, None
            self._deleted = self._scanned = 0
        ends = now + RUN_SECONDS
        while True:
            batch = self._runner.run(
                partial(ctx.warehouse.prune_revisions, self._position, self._retention),
                what="prune revisions",
            )
            self._scanned += batch.scanned
            self._deleted += batch.deleted
            if batch.deleted:
                ctx.observer.revisions_pruned(batch.deleted)
            self._position = batch.last
            if batch.last is None:
                self._sweep_done()
                return
            if self._clock() >= ends:
                return

    def _sweep_done(self) -> None:
        assert self._sweep_began is not None
        self._next_sweep = self._sweep_began + SWEEP_SECONDS
        self._sweep_began = None
        self._ctx.log.info(
            "revisions_swept",
            scanned=self._scanned,
            pruned=self._deleted,
            retention_days=self._retention / timedelta(days=1),
        )
