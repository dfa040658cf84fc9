"""What the sync needs of the platform client and of the warehouse, and nothing more.

The sync decides what to read and what to commit with which cursor; the client and the
warehouse do the I/O.  Naming the few calls it makes as Protocols keeps that arrow one-way
(the sync imports no concrete client or warehouse class) and lets the sync's decisions be
tested with an in-memory fake store and a scripted fake platform, without sockets or a
database.  ``PlatformClient`` and the warehouse's ``MerchantStore`` (one merchant's store,
bound to it and fenced by the holder's epoch) satisfy them structurally: mypy checks it where
the service builds the engine.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from recordsync.core.models import (
    ChangesPage,
    Game,
    GamesPage,
    Record,
    RecordsPage,
)
from recordsync.core.retention import PrunedBatch, RevisionKey
from recordsync.core.state import (
    EndpointAvailability,
    SyncState,
    TailPage,
    Window,
    WindowPage,
    WindowProgress,
)
from recordsync.platform.budget import Pace, Priority


class RecordSource(Protocol):
    """The platform's record reading (spec: Records endpoints), paced by the shared budget
    at the caller's ``priority`` (and within it, ``rank``: higher first)."""

    def records_first(
        self,
        created_from: datetime,
        created_to: datetime,
        *,
        limit: int,
        priority: Priority = Priority.SNAPSHOT,
        rank: float = 0.0,
    ) -> RecordsPage:
        """First page of the snapshot of ``[created_from, created_to)``."""

    def records_next(
        self,
        cursor: str,
        *,
        limit: int,
        priority: Priority = Priority.SNAPSHOT,
        rank: float = 0.0,
    ) -> RecordsPage:
        """Next page of a snapshot chain."""

    def changes(
        self,
        *,
        cursor: str | None = None,
        since: datetime | None = None,
        from_now: bool = False,
        limit: int = 1000,
        priority: Priority = Priority.TAIL,
    ) -> ChangesPage:
        """One page of the change stream: exactly one of cursor, since and from_now."""

    def pace(self) -> Pace:
        """The budget's terms and the measured round trip of a request."""


class SyncStore(Protocol):
    """One merchant's warehouse as the sync sees it: every write stores a page with its cursor
    in one transaction, so a restart resumes from what was committed.  The store is bound to
    its merchant (``Warehouse.for_merchant``, or ``fenced`` under a lease epoch): no call
    names it.  Write results are not read by the sync (``object``)."""

    @property
    def concurrent_writes(self) -> bool:
        """Whether page commits may run side by side (else the sync serialises them)."""

    def load_state(self) -> SyncState | None: ...

    def load_windows(self, job: str) -> Sequence[WindowProgress]: ...

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
        """Save the anchor's cursor and a fresh plan of rebuild windows, atomically; with
        ``defer_bi_indexes``, leave the BI indexes out if no record is stored yet."""

    def ensure_job(
        self, job: str, windows: Sequence[Window], *, defer_bi_indexes: bool = False
    ) -> object:
        """Register a one-shot backfill's windows once (``defer_bi_indexes`` as above)."""

    def commit_window_pages(self, pages: Sequence[WindowPage]) -> Sequence[object]:
        """Snapshot pages, each with its window's cursor, in ONE transaction."""

    def restart_window(self, job: str, window: Window) -> None:
        """Forget a window's cursor after 410 CURSOR_EXPIRED."""

    def split_window(self, job: str, window: Window, pieces: Sequence[Window]) -> None:
        """End ``window`` where ``pieces`` begin (done) and add ``pieces``, atomically."""

    def carry_window(self, job: str, window: Window, following: Window, joined: Window) -> None:
        """End ``window`` where ``joined`` begins (done) and put ``joined`` in place of the
        unread ``following``, atomically."""

    def build_bi_indexes(self) -> object:
        """Build the BI indexes a bulk load into an empty warehouse left out (the warehouse
        drops them when such a job starts); idempotent, nothing to do when none is missing."""

    def missing_bi_indexes(self) -> Sequence[str]:
        """The BI indexes still to build (none: nothing to do)."""

    def commit_tail_page(self, page: TailPage) -> object:
        """A change page with the change cursor that covers it, in one transaction."""

    def stored_revisions(self, record_ids: Collection[str]) -> dict[str, int]:
        """record_id -> stored revision, for the ids that exist."""
        ...

    def note_drift_check(self, *, deferred: bool) -> None:
        """The drift check ran (``deferred`` False), or began to wait behind the sync's own
        reads (True), for ``status`` to say why one is overdue."""
        ...

    def maintain_summaries(self) -> object:
        """Fold the summaries' pending deltas into their totals in bounded batches and build
        one day the totals do not hold yet; the views are exact either way, only faster."""
        ...

    def prune_revisions(self, after: RevisionKey | None, retention: timedelta) -> PrunedBatch:
        """One bounded batch of a sweep of ``record_revisions`` in key order from ``after``
        (None: the start): superseded revisions stored more than ``retention`` ago deleted,
        the current revision of every record kept."""
        ...

    def rounds_announced_missing(self, grace_seconds: float) -> list[str]:
        """Round ids announced by round-end notifications more than ``grace_seconds`` ago that
        ``records`` still lacks, sorted (the cross-check)."""


class VerifyStore(Protocol):
    """The warehouse as ``verify`` sees it, bound to the merchant; its repairs are fenced by
    the store's epoch and go through the revision guards (a stored revision never goes
    down, a row only the warehouse has is never deleted)."""

    def count_created(self, start: datetime, end: datetime) -> int:
        """How many stored rows were created in ``[start, end)``, counted by the database."""
        ...

    def record_ids_created(self, start: datetime, end: datetime) -> Sequence[str]:
        """The ids of the stored rows created in ``[start, end)``."""

    def stored_records(self, record_ids: Collection[str]) -> Mapping[str, Record]:
        """record_id -> the stored row, for the ids that exist."""

    def repair_records(self, *, newer: Sequence[Record], same_revision: Sequence[Record]) -> object:
        """Write back the platform's records, in one transaction, no cursor moved."""


class GameSource(Protocol):
    """The platform's catalogue, paced by the client's query budget."""

    def games(
        self,
        *,
        cursor: str | None = None,
        status: str | None = None,
        limit: int = 1000,
        priority: Priority = Priority.BACKGROUND,
    ) -> GamesPage:
        """One page of ``GET /v1/games``."""


class CatalogueCounts(Protocol):
    """What a committed pass changed, as the warehouse reports it."""

    @property
    def added(self) -> int: ...

    @property
    def changed(self) -> int: ...

    @property
    def unlisted(self) -> int: ...

    @property
    def unstorable(self) -> int: ...

    @property
    def first_unstorable(self) -> str | None: ...


class CatalogueStore(Protocol):
    """The warehouse's side: one whole pass in one transaction, and whether the platform
    serves the catalogue at all (``recordsync status`` shows it)."""

    def commit_catalogue(
        self, games: Sequence[Game], *, kept_ids: Collection[str] = ()
    ) -> CatalogueCounts: ...

    def record_availability(self, seen: EndpointAvailability) -> None: ...
