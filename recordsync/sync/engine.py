"""The sync engine: anchor, snapshot windows and the change tail, as one code path for the
daemon (``run``) and the one-shot range backfill (``backfill``).

The shape follows the spec's "Rebuild without gaps" (Records endpoints):

1. anchor: ``record-changes?from_now=true``, keep ``next_cursor`` (persisted with the plan of
   snapshot windows in one transaction, so a restart never re-anchors by accident): ``anchor``;
2. snapshot ``[history_from, snapshot_end(anchor))`` with ``records`` in windows of at most
   24 h, every page committed with its window's cursor: ``snapshot``;
3. tail ``record-changes`` from the anchor, every ``next_cursor`` committed with its page:
   ``tail``.

This module composes them.  The tail starts as soon as the anchor exists and runs alongside
the snapshot (with priority on the shared rate budget), so a week-long backfill never leaves
today's data a week stale; the drift check (``drift_check``) and the game catalogue
(``catalogue``, at start and then periodically, under the query budget) are periodic jobs
beside them.
They run as one generation of jobs (``jobs``) until a stop from outside, or until the change
cursor expires: then a rebuild anchors again and a new generation starts.
"""

from __future__ import annotations

import random
import threading
from datetime import datetime
from enum import Enum

from recordsync.core.errors import ShutdownRequestedError
from recordsync.core.state import REBUILD_JOB, SyncState
from recordsync.core.stopping import Stopper
from recordsync.sync.anchor import load_or_anchor, rebuild
from recordsync.sync.catalogue import refresh_catalogue
from recordsync.sync.context import SyncContext
from recordsync.sync.cross_check import CrossCheck
from recordsync.sync.drift_check import check_drift
from recordsync.sync.events import SyncObserver
from recordsync.sync.indexes import bi_indexes_missing, build_bi_indexes
from recordsync.sync.jobs import JobHost, Jobs
from recordsync.sync.options import DEFAULT_CATALOGUE_INTERVAL, DEFAULT_DRIFT_INTERVAL, SyncOptions
from recordsync.sync.ports import CatalogueStore, GameSource, RecordSource, SyncStore
from recordsync.sync.snapshot import BackfillResult, backfill, plan_snapshot, schedule_snapshot
from recordsync.sync.tail import Tail, TailWakeups, drain_tail

__all__ = [
    "DEFAULT_CATALOGUE_INTERVAL",
    "DEFAULT_DRIFT_INTERVAL",
    "BackfillResult",
    "SyncEngine",
    "SyncOptions",
]


class _Outcome(Enum):
    STOPPED = "stopped"
    REBUILD = "rebuild"


class SyncEngine:
    def __init__(
        self,
        *,
        client: RecordSource,
        warehouse: SyncStore,
        options: SyncOptions,
        stopper: Stopper,
        observer: SyncObserver | None = None,
        rng: random.Random | None = None,
        host: JobHost | None = None,
        catalogue: tuple[GameSource, CatalogueStore] | None = None,
    ) -> None:
        """``host``: the process's shared scheduler and pools (several merchants in one
        process); None gives each generation a private one, sized by the options.
        ``catalogue``: where the game catalogue is read and stored (usually the same client
        and warehouse); None, or ``options.catalogue_interval`` None, leaves it out."""
        self._host = host
        self._catalogue = catalogue
        self._jobs: Jobs | None = None
        self._wakeups = TailWakeups()
        self._context = SyncContext(
            client=client,
            warehouse=warehouse,
            options=options,
            stopper=stopper,
            observer=observer or SyncObserver(),
            rng=rng or random.Random(),  # noqa: S311 - jitter, not cryptography
        )
        self._cross_check = CrossCheck(self._context)

    def run(self) -> bool:
        """Sync until stopped: anchor if needed, then snapshot and tail side by side.

        Returns True when it stopped because it caught up (``stop_when_caught_up``), False
        on a stop from outside (a signal, a lost lease).
        """
        ctx = self._context
        runner = ctx.runner(ctx.stopper, fatal_is_final=False)
        try:
            state = runner.run(lambda: load_or_anchor(ctx), what="anchor")
            while True:
                outcome = self._run_generation(state)
                if outcome is _Outcome.STOPPED:
                    return ctx.caught_up.is_set()
                ctx.phase("rebuilding")
                state = runner.run(lambda: rebuild(ctx), what="rebuild")
        except ShutdownRequestedError:
            return ctx.caught_up.is_set()

    def backfill(self, start: datetime, end: datetime) -> BackfillResult:
        """Snapshot ``[start, end)`` alone, resumably, without touching the tail's state."""
        return backfill(self._context, start, end, host=self._host)

    def wake_tail(self) -> None:
        """Read the changes now rather than at the next poll (a round just ended); during a
        read, read once more after it (``TailWakeups``).  The read goes through the rate
        budget like any other."""
        jobs = self._jobs
        if self._wakeups.request() and jobs is not None:
            jobs.wake("tail")

    def _run_generation(self, state: SyncState) -> _Outcome:
        """Tail, snapshot workers and drift checks until a stop or an expired change cursor."""
        ctx = self._context
        options = ctx.options
        generation = Stopper(parent=ctx.stopper)
        expired = threading.Event()
        tail = Tail(position=state.change_cursor)
        snapshot = plan_snapshot(ctx, REBUILD_JOB, generation)
        # The rebuild counts as done once the BI indexes a first load left out are built
        # (``indexes``): a run that stops when caught up ends with them.  A rebuild done
        # already may have left them out too (a backfill abandoned half-way, a kill before
        # the build): they are built beside the tail, which does not wait for them.
        snapshot_done = threading.Event()
        unindexed = snapshot is None and bi_indexes_missing(ctx, generation)
        if snapshot is None and not unindexed:
            snapshot_done.set()

        def index() -> None:
            try:
                build_bi_indexes(ctx, generation)
            except ShutdownRequestedError:
                return  # stopped first: the next start builds them
            finally:
                snapshot_done.set()

        workers = options.snapshot_concurrency if snapshot is None else snapshot.most_workers
        jobs = Jobs(generation, workers=workers, host=self._host)
        self._jobs = jobs
        jobs.every(
            "tail",
            options.poll_interval,
            lambda: drain_tail(
                ctx, tail, generation, expired, snapshot_done, wakeups=self._wakeups
            ),
            now=True,
        )
        if unindexed:
            jobs.once("bi-indexes", index)
        if snapshot is not None:
            schedule_snapshot(
                ctx, jobs, REBUILD_JOB, snapshot, generation, fatal_is_final=False, finished=index
            )
        if options.drift_interval:
            jobs.every(
                "drift-check",
                options.drift_interval,
                lambda: check_drift(ctx, generation),
                now=False,
            )
        if options.event_grace is not None:
            cross_check = self._cross_check
            jobs.every(
                "cross-check",
                options.cross_check_interval,
                lambda: cross_check.run(generation),
                now=False,
            )
        if self._catalogue is not None and options.catalogue_interval:
            source, store = self._catalogue
            jobs.every(
                "catalogue",
                options.catalogue_interval,
                lambda: refresh_catalogue(ctx, source, store, generation),
                now=True,
            )
        jobs.run_until_stopped()
        if expired.is_set() and not ctx.stopper.stopped:
            return _Outcome.REBUILD
        return _Outcome.STOPPED
