"""One merchant's warehouse as its sync sees it: bound to the merchant, and under a lease, to
its holder's epoch.

``Warehouse.fenced(merchant_id, epoch)`` gives a holder's sync a store with exactly the calls
of ``recordsync.sync.ports.SyncStore`` (it satisfies that Protocol structurally: the warehouse
never imports the sync), each write passing ``epoch`` so that it is refused with
``LeaseSupersededError`` once another holder raised the merchant's epoch (``lease.epochs``).
``Warehouse.for_merchant(merchant_id)`` gives the same calls unfenced, for the demo and the
tests that sync without a lease.  The merchant is named here once, so no call of the sync
names it again, and none can name another.

It stands on the warehouse's stores of each concept, handed in by the root that builds it,
and never imports that root (a contract in ``pyproject.toml`` keeps it so).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from recordsync.core.models import Game, Record
from recordsync.core.retention import PrunedBatch, RevisionKey
from recordsync.core.state import (
    EndpointAvailability,
    SyncState,
    TailPage,
    Window,
    WindowPage,
    WindowProgress,
)
from recordsync.warehouse.bi.rollups import Maintenance, SummaryStore
from recordsync.warehouse.bi.store import BIStore
from recordsync.warehouse.catalogue import GameStore
from recordsync.warehouse.pages.store import PageStore
from recordsync.warehouse.record_store import RecordStore
from recordsync.warehouse.round_events import RoundEventStore
from recordsync.warehouse.state_store import StateStore
from recordsync.warehouse.values import CatalogueResult, WriteResult


class StoreParts(NamedTuple):
    """The warehouse's stores a merchant's store stands on, handed out by the root
    (``Warehouse.store_parts``) so that nothing else lists them."""

    state: StateStore
    pages: PageStore
    records: RecordStore
    bi: BIStore
    summaries: SummaryStore
    games: GameStore
    events: RoundEventStore


class MerchantStore:
    """The sync's store for ``merchant_id``, fenced by ``epoch`` when one is given (see the
    module docstring), over the warehouse's stores of each concept."""

    def __init__(
        self,
        merchant_id: str,
        epoch: int | None,
        parts: StoreParts,
    ) -> None:
        self._merchant_id = merchant_id
        self._epoch = epoch
        self._state = parts.state
        self._pages = parts.pages
        self._records = parts.records
        self._bi = parts.bi
        self._summaries = parts.summaries
        self._games = parts.games
        self._events = parts.events

    @property
    def merchant_id(self) -> str:
        return self._merchant_id

    @property
    def epoch(self) -> int | None:
        return self._epoch

    @property
    def concurrent_writes(self) -> bool:
        return self._pages.concurrent_writes

    def load_state(self) -> SyncState | None:
        return self._state.load_state(self._merchant_id)

    def load_windows(self, job: str) -> list[WindowProgress]:
        return self._state.load_windows(self._merchant_id, job)

    def start_rebuild(
        self,
        *,
        change_cursor: str,
        anchor_at: datetime,
        history_from: datetime,
        snapshot_to: datetime,
        windows: Sequence[Window],
        defer_bi_indexes: bool = False,
    ) -> SyncState:
        return self._state.start_rebuild(
            self._merchant_id,
            change_cursor=change_cursor,
            anchor_at=anchor_at,
            history_from=history_from,
            snapshot_to=snapshot_to,
            windows=windows,
            defer_bi_indexes=defer_bi_indexes,
            epoch=self._epoch,
        )

    def ensure_job(
        self, job: str, windows: Sequence[Window], *, defer_bi_indexes: bool = False
    ) -> list[WindowProgress]:
        return self._state.ensure_job(
            self._merchant_id, job, windows, defer_bi_indexes=defer_bi_indexes, epoch=self._epoch
        )

    def commit_window_pages(self, pages: Sequence[WindowPage]) -> list[WriteResult]:
        return self._pages.commit_window_pages(self._merchant_id, pages, epoch=self._epoch)

    def restart_window(self, job: str, window: Window) -> None:
        self._state.restart_window(self._merchant_id, job, window, epoch=self._epoch)

    def split_window(self, job: str, window: Window, pieces: Sequence[Window]) -> None:
        self._state.split_window(self._merchant_id, job, window, pieces, epoch=self._epoch)

    def carry_window(self, job: str, window: Window, following: Window, joined: Window) -> None:
        self._state.carry_window(
            self._merchant_id, job, window, following, joined, epoch=self._epoch
        )

    def build_bi_indexes(self) -> list[str]:
        # Not fenced: indexes are nobody's rows, and a build is idempotent wherever it runs.
        return self._bi.build_bi_indexes(self._merchant_id)

    def missing_bi_indexes(self) -> list[str]:
        return self._bi.missing_bi_indexes(self._merchant_id)

    def commit_tail_page(self, page: TailPage) -> WriteResult:
        return self._pages.commit_tail_page(self._merchant_id, page, epoch=self._epoch)

    def stored_revisions(self, record_ids: Collection[str]) -> dict[str, int]:
        return self._records.stored_revisions(self._merchant_id, record_ids)

    def note_drift_check(self, *, deferred: bool) -> None:
        self._state.note_drift_check(self._merchant_id, deferred=deferred, epoch=self._epoch)

    def maintain_summaries(self) -> Maintenance:
        # Not fenced: whoever folds or builds, the totals stay exact (``bi.rollups``); the
        # lease only says who does the work.
        return self._summaries.maintain(self._merchant_id)

    def prune_revisions(self, after: RevisionKey | None, retention: timedelta) -> PrunedBatch:
        return self._records.prune_revisions(
            self._merchant_id, after, retention=retention, epoch=self._epoch
        )

    def rounds_announced_missing(self, grace_seconds: float) -> list[str]:
        # Only marks rounds found (found_at): nothing a superseded holder could spoil.
        return self._events.rounds_announced_missing(self._merchant_id, grace_seconds)

    def commit_catalogue(
        self, games: Sequence[Game], *, kept_ids: Collection[str] = ()
    ) -> CatalogueResult:
        return self._games.commit_catalogue(
            self._merchant_id, games, kept_ids=kept_ids, epoch=self._epoch
        )

    def record_availability(self, seen: EndpointAvailability) -> None:
        self._games.record_availability(self._merchant_id, seen, epoch=self._epoch)

    # -- verify (sync.ports.VerifyStore) ----------------------------------------------------

    def count_created(self, start: datetime, end: datetime) -> int:
        return self._records.count_created(self._merchant_id, start, end)

    def record_ids_created(self, start: datetime, end: datetime) -> list[str]:
        return self._records.record_ids_created(self._merchant_id, start, end)

    def stored_records(self, record_ids: Collection[str]) -> dict[str, Record]:
        return self._records.stored_records(self._merchant_id, record_ids)

    def repair_records(self, *, newer: Sequence[Record], same_revision: Sequence[Record]) -> None:
        self._pages.repair_records(
            self._merchant_id, newer=newer, same_revision=same_revision, epoch=self._epoch
        )

    def __repr__(self) -> str:
        return f"MerchantStore(merchant_id={self._merchant_id!r}, epoch={self._epoch})"
