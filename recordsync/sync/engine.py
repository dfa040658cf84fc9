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
today's data a week stale; it runs in the engine's own thread, where nothing else can take
its place.  The snapshot workers, the drift check (``drift_check``), the cross-check and the
game catalogue (``catalogue``, at start and then periodically, under the query budget) are
jobs beside it (``jobs``), on pools that may be shared with other merchants' engines, which
no job of theirs ever holds to wait out a failure (``core.waiting``).
They run as one generation until a stop from outside, or until the change cursor expires:
then a rebuild anchors again and a new generation starts.
"""

from __future__ import annotations

import contextlib
import random
import threading
from datetime import datetime
from enum import Enum
from functools import partial
from typing import Final

from recordsync.core.errors import ShutdownRequestedError
from recordsync.core.state import REBUILD_JOB, SyncState
from recordsync.core.stopping import Stopper
from recordsync.sync.anchor import load_or_anchor, rebuild
from recordsync.sync.catalogue import CatalogueRefresh
from recordsync.sync.context import SyncContext
from recordsync.sync.cross_check import CrossCheck
from recordsync.sync.demand import SnapshotDemand
from recordsync.sync.drift_check import DriftCheck
from recordsync.sync.events import SyncObserver
from recordsync.sync.indexes import bi_indexes_missing, build_bi_indexes
from recordsync.sync.jobs import JobHost, Jobs
from recordsync.sync.options import DEFAULT_CATALOGUE_INTERVAL, DEFAULT_DRIFT_INTERVAL, SyncOptions
from recordsync.sync.ports import CatalogueStore, GameSource, RecordSource, SyncStore
from recordsync.sync.revision_retention import PERIOD_SECONDS as RETENTION_PERIOD
from recordsync.sync.revision_retention import RevisionRetention
from recordsync.sync.snapshot.job import BackfillResult, backfill, plan_snapshot, schedule_snapshot
from recordsync.sync.tail import Tail, TailWakeups, follow_tail

__all__ = [
    "DEFAULT_CATALOGUE_INTERVAL",
    "DEFAULT_DRIFT_INTERVAL",
    "BackfillResult",
    "SyncEngine",
    "SyncOptions",
]


class _Outcome(Enum):
    STOPPED = "stopped"
    REBUILD = "rebuild"  # the change cursor expired
    RESET = "reset"  # an operator asked for it (``request_rebuild``)


RESET_REASON: Final = "reset by an operator"
# Seconds between two runs of the summaries' upkeep (``warehouse.bi.rollups``).
SUMMARIES_INTERVAL_S: Final = 1.0


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
        demand: SnapshotDemand | None = None,
    ) -> None:
        """``host``: the process's shared scheduler and pools (several merchants in one
        process); None gives each generation a private one, sized by the options.
        ``catalogue``: where the game catalogue is read and stored (usually the same client
        and warehouse); None, or ``options.catalogue_interval`` None, leaves it out.
        ``demand``: the merchant's one demand in this process, shared with its other engines
        (``service.runtime`` passes it), so that the tail of any of them gives the budget to
        the jobs of all; None: one of its own."""
        self._host = host
        self._catalogue = catalogue
        self._wakeups = TailWakeups()
        self._context = SyncContext(
            client=client,
            warehouse=warehouse,
            options=options,
            stopper=stopper,
            observer=observer or SyncObserver(),
            rng=rng or random.Random(),  # noqa: S311 - jitter, not cryptography
            demand=demand or SnapshotDemand(),
        )
        self._cross_check = CrossCheck(self._context)
        # An operator's reset (``request_rebuild``): the generation running ends, a rebuild
        # follows, as after an expired change cursor.
        self._rebuild_requested = threading.Event()
        self._generation: Stopper | None = None

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
                reason = RESET_REASON if outcome is _Outcome.RESET else "change cursor expired"
                state = runner.run(partial(rebuild, ctx, reason), what="rebuild")
        except ShutdownRequestedError:
            return ctx.caught_up.is_set()

    def backfill(self, start: datetime, end: datetime, *, job: str | None = None) -> BackfillResult:
        """Snapshot ``[start, end)`` alone, resumably, without touching the tail's state (as
        ``job``: a resync's; a backfill's by default)."""
        return backfill(self._context, start, end, host=self._host, job=job)

    def request_rebuild(self) -> None:
        """Re-anchor and rebuild from history_from now, keeping the rows: the 410 recovery on
        an operator's demand (``recordsync merchant reset``).  The generation running ends,
        its pages committed, and the rebuild follows in ``run``'s thread."""
        self._rebuild_requested.set()
        generation = self._generation
        if generation is not None:
            generation.stop()

    def reanchor(self) -> SyncState:
        """The same re-anchoring in the caller's thread, for a process that syncs nothing
        (the command, with no daemon): a new anchor and a new snapshot plan, the rows kept;
        whoever syncs the merchant next reads the plan."""
        ctx = self._context
        runner = ctx.runner(ctx.stopper, fatal_is_final=True)
        return runner.run(lambda: rebuild(ctx, RESET_REASON), what="reset")

    def wake_tail(self) -> None:
        """Read the changes now rather than at the next poll (a round just ended); during a
        read, read once more after it (``TailWakeups``).  The read goes through the rate
        budget like any other."""
        self._wakeups.request()

    def _run_generation(self, state: SyncState) -> _Outcome:
        """The tail in this thread, the snapshot workers and the checks as jobs beside it,
        until a stop or an expired change cursor."""
        ctx = self._context
        generation = Stopper(parent=ctx.stopper)
        self._generation = generation
        if self._rebuild_requested.is_set():  # asked while anchoring: this generation is over
            generation.stop()
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
        index_runner = ctx.runner(generation, fatal_is_final=False)

        def index() -> None:
            # A deferred build (core.waiting) runs again: the rebuild is not done before it.
            with contextlib.suppress(ShutdownRequestedError):  # the next start builds them
                build_bi_indexes(ctx, index_runner)
            snapshot_done.set()

        workers = ctx.options.snapshot_concurrency if snapshot is None else snapshot.most_workers
        jobs = Jobs(generation, workers=workers, host=self._host)
        if unindexed:
            jobs.once("bi-indexes", index)
        if snapshot is not None:
            schedule_snapshot(
                ctx, jobs, REBUILD_JOB, snapshot, generation, fatal_is_final=False, finished=index
            )
        self._schedule_checks(jobs, generation)
        generation.adopt(self._wakeups)
        # A job of the merchant starting or ending, in this engine or another, changes how
        # long the tail waits (``tail_pace``).
        with (
            ctx.demand.listening(self._wakeups.nudge),
            jobs.running(),
            contextlib.suppress(ShutdownRequestedError),
        ):
            # A stop while the tail waited out a failure: a job's failure is raised on exit.
            follow_tail(ctx, tail, generation, expired, snapshot_done, wakeups=self._wakeups)
        self._generation = None
        if ctx.stopper.stopped:
            return _Outcome.STOPPED
        if self._rebuild_requested.is_set():
            self._rebuild_requested.clear()
            return _Outcome.RESET
        if expired.is_set():
            return _Outcome.REBUILD
        return _Outcome.STOPPED

    def _schedule_checks(self, jobs: Jobs, generation: Stopper) -> None:
        """The periodic jobs beside the tail; each keeps its own runner, so that its failures
        are counted across its deferred runs."""
        ctx = self._context
        options = ctx.options
        if options.drift_interval:
            drift = DriftCheck(ctx, ctx.runner(generation, fatal_is_final=False))
            jobs.every("drift-check", options.drift_interval, drift.run, now=False)
            ctx.observer.drift_check_scheduled(options.drift_interval)
        if options.revision_retention is not None:
            retention = RevisionRetention(
                ctx, ctx.runner(generation, fatal_is_final=False), options.revision_retention
            )
            jobs.every("revision-retention", RETENTION_PERIOD, retention.run, now=False)
        if options.event_grace is not None:
            cross_check = self._cross_check
            cross_runner = ctx.runner(generation, fatal_is_final=False)
            jobs.every(
                "cross-check",
                options.cross_check_interval,
                lambda: cross_check.run(cross_runner),
                now=False,
            )
        # The summaries' upkeep: the views are exact without it, only slower as deltas pile up.
        summaries_runner = ctx.runner(generation, fatal_is_final=False)
        jobs.every(
            "summaries",
            SUMMARIES_INTERVAL_S,
            lambda: _discard(
                summaries_runner.run(ctx.warehouse.maintain_summaries, what="summaries")
            ),
            now=True,
        )
        if self._catalogue is not None and options.catalogue_interval:
            source, store = self._catalogue
            refresh = CatalogueRefresh(
                ctx, source, store, ctx.runner(generation, fatal_is_final=False)
            )
            jobs.every("catalogue", options.catalogue_interval, refresh.run, now=True)


def _discard(_result: object) -> None:
    """A job's result is nobody's: what it did is in its logs."""
