"""The engine's options: built once by the service from the settings (or by a test)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from recordsync.sync.plan import DEFAULT_SNAPSHOT_OVERLAP
from recordsync.sync.tail_pace import TailPacing

DEFAULT_DRIFT_INTERVAL = 3600.0
DEFAULT_CROSS_CHECK_INTERVAL = 60.0
DEFAULT_CATALOGUE_INTERVAL = 3600.0


@dataclass(frozen=True, slots=True)
class SyncOptions:
    merchant_id: str
    history_from: datetime | None
    page_size: int = 1000
    # When the tail reads (``tail_pace``): every ``poll_interval`` while changes flow,
    # stretched over empty pages; with round-end notifications (``tail_pacing.safety`` set),
    # a safety poll and the wake-ups.
    tail_pacing: TailPacing = field(default_factory=TailPacing)
    snapshot_concurrency: int = 4
    # The most chains a snapshot may grow to when the round trip asks for more (windows.py);
    # None: windows.MAX_CHAINS.  A daemon sharing its worker threads among merchants sets
    # each merchant's share, so that no merchant's growth starves the others.
    snapshot_most_chains: int | None = None
    snapshot_overlap: timedelta = DEFAULT_SNAPSHOT_OVERLAP
    # Seconds between drift checks of the last closed day; None turns them off.
    drift_interval: float | None = DEFAULT_DRIFT_INTERVAL
    # Superseded revisions stored longer ago than this leave record_revisions
    # (``revision_retention``); None keeps every revision.
    revision_retention: timedelta | None = None
    # Seconds an announced round (a round-end notification) may take to reach the warehouse
    # before the cross-check counts it missing; None: no cross-check (no events received).
    event_grace: float | None = None
    cross_check_interval: float = DEFAULT_CROSS_CHECK_INTERVAL
    # Seconds between game catalogue passes (the first at start); None turns them off, and
    # so does an engine given no catalogue source.
    catalogue_interval: float | None = DEFAULT_CATALOGUE_INTERVAL
    # Demo and tests: stop once the snapshot is done and the tail has no backlog.
    stop_when_caught_up: bool = False
    # One-shot jobs (a backfill's snapshot): seconds a platform that cannot be reached is
    # tried before the job ends with PlatformUnreachableError; None: for ever (the daemon).
    give_up_unreachable: float | None = None
    # An empty change page that leaves the cursor where it was has nothing to store; the tail
    # still commits one (its time, its projection_as_of) once this many seconds passed since
    # its last commit, so that the warehouse shows it alive (readiness, status).
    idle_commit_interval: float = 10.0

    @property
    def poll_interval(self) -> float:
        return self.tail_pacing.interval
