"""What the parts of one engine share: the ports, the options, the observer, the stop, the
merchant's demand and the writer lock.

Every request goes through the client's one rate budget; commits are serialised by one
writer lock unless the warehouse takes concurrent commits (PostgreSQL and MariaDB,
``SyncStore.concurrent_writes``), and snapshot pages waiting for that lock commit together
(``group_commit``).  The anchor, the snapshot workers, the tail and the drift
check each take this context instead of the engine, so each is a plain function of it that a
test can drive with fakes.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter
from typing import Any, Final

import structlog

from recordsync.core.extra_fields import unknown_counts
from recordsync.core.models import KNOWN_STATUSES, Record, RecordsPage, RejectedItem
from recordsync.core.state import WindowPage
from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Priority
from recordsync.sync.demand import SnapshotDemand
from recordsync.sync.events import SyncObserver
from recordsync.sync.group_commit import GroupCommits
from recordsync.sync.options import SyncOptions
from recordsync.sync.ports import RecordSource, SyncStore
from recordsync.sync.resilience import StepRunner

_STATUS: Final = attrgetter("status")
_EXTRA: Final = attrgetter("extra_fields")
_RECORD_ID: Final = attrgetter("record_id")

log = structlog.get_logger("recordsync.sync")


@dataclass(eq=False)
class SyncContext:
    """One engine's shared pieces.  ``stopper`` is the engine's own (a stop from outside, or
    the end once caught up); each generation of jobs runs under a child of it."""

    client: RecordSource
    warehouse: SyncStore
    options: SyncOptions
    stopper: Stopper
    observer: SyncObserver
    rng: random.Random
    # The merchant's jobs reading windows now (a snapshot, a backfill, whichever engine runs
    # them): the tail gives them the budget.  Shared by every engine of the merchant here.
    demand: SnapshotDemand = field(default_factory=SnapshotDemand)
    # Commits wait for one another unless the warehouse takes them side by side.
    writer: AbstractContextManager[Any] = field(init=False)
    # Snapshot pages waiting for that one writer commit together (``group_commit``); None
    # when the warehouse takes commits side by side: nothing waits, nothing is grouped.
    window_commits: GroupCommits[WindowPage, object] | None = field(init=False)
    caught_up: threading.Event = field(init=False, default_factory=threading.Event)
    log: Any = field(init=False)
    # Unknown record members already warned of by this process (one warning per name).
    warned_fields: set[str] = field(init=False, default_factory=set)
    _warned_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        concurrent = self.warehouse.concurrent_writes
        self.writer = nullcontext() if concurrent else threading.Lock()
        self.window_commits = (
            None if concurrent else GroupCommits(self._commit_window_pages, writer=self.writer)
        )
        self.log = log.bind(merchant_id=self.options.merchant_id)

    def commit_window_page(self, page: WindowPage) -> float:
        """Commit a snapshot page with its window's cursor; the seconds its transaction took
        (its group's, when it waited for the writer beside others), not the wait before it."""
        if self.window_commits is not None:
            return self.window_commits.commit(page).seconds
        started = time.perf_counter()
        self._commit_window_pages([page])
        return time.perf_counter() - started

    def _commit_window_pages(self, pages: Sequence[WindowPage]) -> Sequence[object]:
        return self.warehouse.commit_window_pages(pages)

    def _report_unknown_fields(self, records: Sequence[Record]) -> None:
        """Members the platform added: counted for every row, and one warning per name the
        first time this process commits it (kept in ``extra_fields``, listed by ``status``)."""
        extras = list(map(_EXTRA, records))
        if extras.count(None) == len(extras):
            return
        found = unknown_counts(extras, map(_RECORD_ID, records))
        self.observer.unknown_fields({name: rows for name, (rows, _) in found.items()})
        with self._warned_lock:  # window workers commit side by side
            new = {name: seen for name, seen in found.items() if name not in self.warned_fields}
            self.warned_fields.update(new)
        for name, (rows, record_id) in new.items():
            self.log.warning(
                "record_field_unknown",
                field=name,
                record_id=record_id,
                rows=rows,
                action="kept in extra_fields; recordsync fields promote makes it a column",
            )

    def phase(self, phase: str) -> None:
        """Every later event of this merchant carries the phase; observers hear of it too
        (a one-merchant process puts it on all its events: ``daemon.observers``)."""
        self.log = self.log.bind(phase=phase)
        self.observer.phase_changed(phase)

    def runner(self, stopper: Stopper, *, fatal_is_final: bool) -> StepRunner:
        return StepRunner(
            stopper=stopper,
            observer=self.observer,
            fatal_is_final=fatal_is_final,
            rng=random.Random(self.rng.random()),  # noqa: S311 - jitter, not cryptography
            logger=self.log,
            give_up_after=self.options.give_up_unreachable if fatal_is_final else None,
        )

    def records_page(
        self,
        start: datetime,
        end: datetime,
        cursor: str | None,
        priority: Priority,
        rank: float = 0.0,
    ) -> RecordsPage:
        """A window's first page, or the next one of its chain (snapshot and drift check);
        ``rank``: the chain's pages left, most first among waiters of its priority."""
        size = self.options.page_size
        if cursor is None:
            return self.client.records_first(start, end, limit=size, priority=priority, rank=rank)
        return self.client.records_next(cursor, limit=size, priority=priority, rank=rank)

    def after_commit(
        self,
        source: str,
        records: Sequence[Record],
        rejected: Sequence[RejectedItem],
        request_id: str | None,
    ) -> None:
        """Say loudly what was quarantined or unusual; never drop it silently."""
        if rejected:
            self.observer.quarantined(source, len(rejected))
            self.log.warning(
                "records_quarantined",
                source=source,
                count=len(rejected),
                first_reason=rejected[0].reason,
                record_ids=[item.record_id for item in rejected[:5]],
                request_id=request_id,
            )
        self._report_unknown_fields(records)
        # Counted by one loop in C (Counter over map), then judged per distinct status.
        statuses = Counter(map(_STATUS, records))
        unknown = {status: n for status, n in statuses.items() if status not in KNOWN_STATUSES}
        if unknown:
            self.log.warning(
                "unknown_record_status",
                source=source,
                statuses=dict(unknown),
                request_id=request_id,
                action="stored as received",
            )
