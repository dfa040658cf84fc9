"""One merchant's warehouse as its holder sees it: every write carries the holder's epoch.

``Warehouse.fenced(merchant_id, epoch)`` gives the sync a store with exactly the calls of
``recordsync.sync.ports.SyncStore`` (it satisfies that Protocol structurally: the warehouse
never imports the sync), each write passing ``epoch`` so that it is refused with
``LeaseSupersededError`` once another holder raised the merchant's epoch (``lease.epochs``).  It
serves its one merchant only: a call about another is a bug, refused with ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from recordsync.core.models import Game, Record, RecordChange, RejectedItem
from recordsync.core.state import (
    EndpointAvailability,
    SyncState,
    Window,
    WindowPage,
    WindowProgress,
)
from recordsync.warehouse.values import CatalogueResult, WriteResult

if TYPE_CHECKING:
    from recordsync.warehouse.store import Warehouse


class FencedWarehouse:
    """The sync's store for ``merchant_id`` held at ``epoch`` (see the module docstring)."""

    def __init__(self, warehouse: Warehouse, merchant_id: str, epoch: int) -> None:
        self._warehouse = warehouse
        self._merchant_id = merchant_id
        self._epoch = epoch

    @property
    def merchant_id(self) -> str:
        return self._merchant_id

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def concurrent_writes(self) -> bool:
        return self._warehouse.concurrent_writes

    def load_state(self, merchant_id: str) -> SyncState | None:
        return self._warehouse.load_state(self._own(merchant_id))

    def load_windows(self, merchant_id: str, job: str) -> list[WindowProgress]:
        return self._warehouse.load_windows(self._own(merchant_id), job)

    def start_rebuild(
        self,
        merchant_id: str,
        *,
        change_cursor: str,
        anchor_at: datetime,
        history_from: datetime,
        snapshot_to: datetime,
        windows: Sequence[Window],
        defer_bi_indexes: bool = False,
    ) -> SyncState:
        return self._warehouse.start_rebuild(
            self._own(merchant_id),
            change_cursor=change_cursor,
            anchor_at=anchor_at,
            history_from=history_from,
            snapshot_to=snapshot_to,
            windows=windows,
            defer_bi_indexes=defer_bi_indexes,
            epoch=self._epoch,
        )

    def ensure_job(
        self,
        merchant_id: str,
        job: str,
        windows: Sequence[Window],
        *,
        defer_bi_indexes: bool = False,
    ) -> list[WindowProgress]:
        return self._warehouse.ensure_job(
            self._own(merchant_id),
            job,
            windows,
            defer_bi_indexes=defer_bi_indexes,
            epoch=self._epoch,
        )

    def commit_window_page(
        self,
        merchant_id: str,
        job: str,
        window: Window,
        *,
        records: Sequence[Record],
        rejected: Sequence[RejectedItem],
        next_cursor: str | None,
        cursor_issued_at: datetime | None,
        done: bool,
        position: str,
    ) -> WriteResult:
        return self._warehouse.commit_window_page(
            self._own(merchant_id),
            job,
            window,
            records=records,
            rejected=rejected,
            next_cursor=next_cursor,
            cursor_issued_at=cursor_issued_at,
            done=done,
            position=position,
            epoch=self._epoch,
        )

    def commit_window_pages(
        self, merchant_id: str, pages: Sequence[WindowPage]
    ) -> list[WriteResult]:
        return self._warehouse.commit_window_pages(self._own(merchant_id), pages, epoch=self._epoch)

    def restart_window(self, merchant_id: str, job: str, window: Window) -> None:
        self._warehouse.restart_window(self._own(merchant_id), job, window, epoch=self._epoch)

    def split_window(
        self, merchant_id: str, job: str, window: Window, pieces: Sequence[Window]
    ) -> None:
        self._warehouse.split_window(self._own(merchant_id), job, window, pieces, epoch=self._epoch)

    def carry_window(
        self, merchant_id: str, job: str, window: Window, following: Window, joined: Window
    ) -> None:
        self._warehouse.carry_window(
            self._own(merchant_id), job, window, following, joined, epoch=self._epoch
        )

    def build_bi_indexes(self, merchant_id: str) -> list[str]:
        # Not fenced: indexes are nobody's rows, and a build is idempotent wherever it runs.
        return self._warehouse.build_bi_indexes(self._own(merchant_id))

    def missing_bi_indexes(self, merchant_id: str) -> list[str]:
        return self._warehouse.missing_bi_indexes(self._own(merchant_id))

    def commit_tail_page(
        self,
        merchant_id: str,
        *,
        records: Sequence[Record],
        rejected: Sequence[RejectedItem],
        next_cursor: str,
        last_sequence: str | None,
        projection_as_of: datetime | None,
        position: str,
        changes: Sequence[RecordChange] = (),
    ) -> WriteResult:
        return self._warehouse.commit_tail_page(
            self._own(merchant_id),
            records=records,
            rejected=rejected,
            next_cursor=next_cursor,
            last_sequence=last_sequence,
            projection_as_of=projection_as_of,
            position=position,
            changes=changes,
            epoch=self._epoch,
        )

    def stored_revisions(self, merchant_id: str, record_ids: Collection[str]) -> dict[str, int]:
        return self._warehouse.stored_revisions(self._own(merchant_id), record_ids)

    def rounds_announced_missing(self, merchant_id: str, grace_seconds: float) -> list[str]:
        # Only marks rounds found (found_at): nothing a superseded holder could spoil.
        return self._warehouse.rounds_announced_missing(self._own(merchant_id), grace_seconds)

    def commit_catalogue(
        self, merchant_id: str, games: Sequence[Game], *, kept_ids: Collection[str] = ()
    ) -> CatalogueResult:
        return self._warehouse.commit_catalogue(
            self._own(merchant_id), games, kept_ids=kept_ids, epoch=self._epoch
        )

    def record_availability(self, merchant_id: str, seen: EndpointAvailability) -> None:
        self._warehouse.record_availability(self._own(merchant_id), seen, epoch=self._epoch)

    def _own(self, merchant_id: str) -> str:
        if merchant_id != self._merchant_id:
            raise ValueError(
                f"this store is merchant {self._merchant_id!r}'s, not {merchant_id!r}'s"
            )
        return merchant_id

    def __repr__(self) -> str:
        return f"FencedWarehouse(merchant_id={self._merchant_id!r}, epoch={self._epoch})"
