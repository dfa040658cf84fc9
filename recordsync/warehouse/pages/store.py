"""The page store: each page committed in ONE transaction of its own, whole, here.

A page's commit is planned before its transaction (``commits.plan_page``), its rows sent
to the server ahead of the fence check where the backend stages them (``PageWriter.send``),
then fenced, written and its cursor moved (``commits``) in that one transaction, which runs
again whole when the server rolled it back to break a deadlock (``conflicts``).  Any
"server gone" error is raised as ``WarehouseUnavailableError`` after the transaction has
rolled back (``connection``); the caller waits and tries again with the same page.

The fence is the lease's epoch check, handed in by the warehouse (``Fence``): this wing
knows the rows it writes, not the lease protocol.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol, TypeVar

import structlog
from sqlalchemy import Connection, Engine

from recordsync.core.models import Record
from recordsync.core.state import TailPage, WindowPage
from recordsync.warehouse.connection import side_by_side_writer, translate_errors
from recordsync.warehouse.fields.promoted import Promoted, PromotedCache
from recordsync.warehouse.fields.sightings import SightingRefresh
from recordsync.warehouse.pages import commits
from recordsync.warehouse.pages.conflicts import retry_lost_conflicts
from recordsync.warehouse.pages.writer import PageWriter, page_writer_for
from recordsync.warehouse.values import WriteResult

T = TypeVar("T")

_log = structlog.get_logger(__name__)


class Fence(Protocol):
    """Refuse the write in progress unless ``epoch`` is still the merchant's (the lease's
    ``epochs.check_epoch``): the first shared statement of a fenced page transaction."""

    def __call__(self, conn: Connection, merchant_id: str, epoch: int, *, action: str) -> None: ...


def _utc_now() -> datetime:
    return datetime.now(UTC)


class PageStore:
    """Pages committed with their cursors on the warehouse's engine (module docstring).

    ``clock`` stamps ``synced_at`` and ``quarantined_at`` only: bookkeeping, never a sync
    boundary.  ``keep_revisions=False``: nothing is written to ``record_revisions`` and the
    write path does no extra work at all.  ``sleep`` and ``rng``: the pause before a page
    transaction that lost a lock conflict runs again.  ``promoted``: the fields promoted to
    columns, which every page fills (``fields.promoted``).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        fence: Fence,
        promoted: PromotedCache,
        clock: Callable[[], datetime] = _utc_now,
        keep_revisions: bool = True,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._engine = engine
        # Pages side by side: on MariaDB READ COMMITTED takes no gap locks but for duplicate
        # checks (REPEATABLE READ locks the gap before every stored key a page upserts), and a
        # statement after a lock, such as the count of open windows once the last one
        # finishes, sees the newest commits, as on PostgreSQL.  The guards need no more: each
        # compares with the row it has locked.  (Measured: no cost, and with rows in key
        # order no deadlock under either level.)
        self._committer = side_by_side_writer(engine)
        self._fence = fence
        self._promoted_fields = promoted
        self._clock = clock
        self._keep_revisions = keep_revisions
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 - retry jitter
        self._sighting_refresh = SightingRefresh()
        self._writer: PageWriter | None = None  # compiled at the first write (``_writer_for``)

    @property
    def keep_revisions(self) -> bool:
        return self._keep_revisions

    @property
    def concurrent_writes(self) -> bool:
        """Whether page commits may run side by side, or should wait for one another.

        PostgreSQL and MariaDB: yes.  The server's work for one page then overlaps the next
        page's fetch and encoding in our process, which on one page at a time run one after
        the other (bench/README.md, 2 and 7).  Each page locks its rows in key order; on
        MariaDB under READ COMMITTED (see ``__init__``), and a page that still loses a
        deadlock is run again whole (``conflicts``).  SQLite has one writer at a time
        anyway: waiting in Python is cheaper than in its busy handler.
        """
        return self._engine.dialect.name != "sqlite"

    def commit_window_pages(
        self, merchant_id: str, pages: Sequence[WindowPage], epoch: int | None = None
    ) -> list[WriteResult]:
        """Store snapshot pages, each moving its own window's cursor, in ONE transaction (one
        page, or the sync's group commits, ``sync.group_commit``): every page with the cursor
        that covers it.  When the commit finishes the last rebuild window, the phase becomes
        TAILING in the same transaction."""
        now = self._clock()
        action = "commit window page" if len(pages) == 1 else "commit window pages"
        promoted = self._promoted()
        plans = [
            self._plan(merchant_id, page, page.job, now=now, promoted=promoted) for page in pages
        ]
        # One page's rows go to the server before its fence check (``_commit``); pages
        # grouped in one transaction share its stage, so they go one after the other.
        ahead = len(pages) == 1

        def send(conn: Connection) -> None:
            self._writer_for(conn).send(conn, plans[0].staged)

        def commit(conn: Connection) -> list[WriteResult]:
            writer = self._writer_for(conn)
            return [
                commits.commit_window_page(
                    conn, writer, merchant_id, plan, page, now=now, sent=ahead
                )
                for page, plan in zip(pages, plans, strict=True)
            ]

        return self._commit(action, merchant_id, epoch, commit, before=send if ahead else None)

    def commit_tail_page(
        self, merchant_id: str, page: TailPage, *, epoch: int | None = None
    ) -> WriteResult:
        """Store one change page and move the change cursor, in one transaction (``TailPage``
        says what each part is for)."""
        now = self._clock()
        plan = self._plan(
            merchant_id, page, commits.TAIL_SOURCE, now=now, promoted=self._promoted()
        )

        def send(conn: Connection) -> None:
            self._writer_for(conn).send(conn, plan.staged)

        def commit(conn: Connection) -> WriteResult:
            return commits.commit_tail_page(
                conn, self._writer_for(conn), merchant_id, plan, page, now=now, sent=True
            )

        return self._commit("commit tail page", merchant_id, epoch, commit, before=send)

    def repair_records(
        self,
        merchant_id: str,
        *,
        newer: Sequence[Record],
        same_revision: Sequence[Record],
        epoch: int | None = None,
    ) -> None:
        """Write back what the platform returned, in one transaction (``verify --repair``).

        The rows only, never a cursor, under the revision guards (``commits.commit_repair``
        says which); with ``epoch``, fenced like every page commit.
        """
        now = self._clock()

        def commit(conn: Connection) -> None:
            commits.commit_repair(
                conn,
                self._writer_for(conn),
                merchant_id,
                newer=newer,
                same_revision=same_revision,
                keep_revisions=self._keep_revisions,
                now=now,
            )

        self._commit("repair records", merchant_id, epoch, commit)

    def _commit(
        self,
        action: str,
        merchant_id: str,
        epoch: int | None,
        work: Callable[[Connection], T],
        *,
        before: Callable[[Connection], None] | None = None,
    ) -> T:
        """One page transaction, which may run beside others: with an ``epoch``, fenced by its
        first shared statement, and run again whole when the server rolled it back to break a
        deadlock (``conflicts``).

        ``before`` sends the page's rows ahead of the fence check: it writes nothing shared
        (a session's temporary stage), so the check still comes before every shared write,
        and a client paused in the middle of sending them holds no lock (PostgreSQL waits
        for a COPY's rows for ever, whatever its statement_timeout).
        """

        def transaction() -> T:
            with translate_errors(action), self._committer.begin() as conn:
                if before is not None:
                    before(conn)
                if epoch is not None:
                    self._fence(conn, merchant_id, epoch, action=action)
                return work(conn)

        def retried(attempt: int) -> None:
            _log.info(
                "page_commit_retried",
                merchant_id=merchant_id,
                write=action,
                attempt=attempt,
                reason="lock conflict with a page committed beside it; nothing was stored",
            )

        return retry_lost_conflicts(transaction, sleep=self._sleep, rng=self._rng, on_retry=retried)

    def _writer_for(self, conn: Connection) -> PageWriter:
        """Compiled against the connected dialect: MariaDB's syntax depends on the server."""
        if self._writer is None:
            self._writer = page_writer_for(conn.dialect)
        return self._writer

    def _plan(
        self,
        merchant_id: str,
        page: WindowPage | TailPage,
        source: str,
        *,
        now: datetime,
        promoted: tuple[Promoted, ...],
    ) -> commits.PagePlan:
        """What a page writes, planned before its transaction opens."""
        return commits.plan_page(
            page.records,
            page.rejected,
            merchant_id=merchant_id,
            source=source,
            position=page.position,
            keep_revisions=self._keep_revisions,
            now=now,
            changes=page.changes if isinstance(page, TailPage) else (),
            promoted=promoted,
            refresh=functools.partial(self._sighting_refresh.due, merchant_id),
        )

    def _promoted(self) -> tuple[Promoted, ...]:
        with translate_errors("read promoted fields"):
            return self._promoted_fields.current()
