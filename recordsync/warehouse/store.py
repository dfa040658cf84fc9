"""The warehouse's one entry point: it owns the engine, the transactions and the error mapping.

Each read or write runs in ONE transaction, opened here and handed to the module that does
the work: ``sync_state`` (where the sync stands), ``pages.commits`` (a page's rows with its
cursor; it says why they must commit together), ``reads`` and ``summaries`` (what was
stored); ``lease`` the protocol by which processes share the merchants (its session's locks
live on a connection of their own).
Any "server gone" error is raised as ``WarehouseUnavailableError`` (see ``connection``) after
the transaction has rolled back; the caller waits and tries again with the same page.

Fenced writes.  Every write the sync makes takes an optional lease ``epoch`` (given by
``FleetSession.try_hold``; ``fenced`` passes it for the sync).  With one, the FIRST statement
of the write's transaction checks it against the merchant's (``lease.epochs.check_epoch``), and a
superseded holder's write raises ``LeaseSupersededError`` with nothing of it stored.

The warehouse never calls the platform and never decides what to read next: it stores what
the sync hands it and answers what was stored.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import structlog
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.pool import NullPool

from recordsync.core.database_url import SUPPORTED_BACKENDS, check_driver
from recordsync.core.errors import (
    ConfigurationError,
    PermissionDeniedError,
    WarehouseUnavailableError,
)
from recordsync.core.models import Game, Record, RejectedItem
from recordsync.core.retention import PrunedBatch, RevisionKey
from recordsync.core.round_events import RoundEvent, RoundEventReceipt
from recordsync.core.state import (
    REBUILD_JOB,
    EndpointAvailability,
    SyncState,
    TailPage,
    Window,
    WindowPage,
    WindowProgress,
)
from recordsync.warehouse import (
    availability,
    catalogue,
    drift_checks,
    reads,
    revision_retention,
    round_events,
    sync_state,
    timeouts,
)
from recordsync.warehouse.bi import indexes as bi_indexes
from recordsync.warehouse.bi import summaries
from recordsync.warehouse.bi.rollups import SummaryStore
from recordsync.warehouse.connection import (
    WRITE_OPTION,
    create_warehouse_engine,
    sqlite_file,
    translate_errors,
    warehouse_url,
)
from recordsync.warehouse.controls import ControlStore
from recordsync.warehouse.fields import promotion
from recordsync.warehouse.fields.promoted import PromotedCache
from recordsync.warehouse.fields.promotion import FieldsView, PromotionPlan, PromotionResult
from recordsync.warehouse.fields.sightings import Sighting, read_sightings
from recordsync.warehouse.lease import FleetSession, epochs, support
from recordsync.warehouse.lease.backends import merchant_locks
from recordsync.warehouse.merchant_store import MerchantStore
from recordsync.warehouse.migrate import schema_state
from recordsync.warehouse.migrate import upgrade as upgrade_schema
from recordsync.warehouse.pages.conflicts import retry_lost_conflicts
from recordsync.warehouse.pages.store import PageStore
from recordsync.warehouse.pool import CheckoutTimedPool, PoolDemand
from recordsync.warehouse.requests.store import RequestStore
from recordsync.warehouse.state_transfer import StateTransfer
from recordsync.warehouse.values import (
    Availability,
    CatalogueResult,
    DailySummary,
    DriftCheckRun,
    Freshness,
    GameName,
    QuarantinedRecord,
    WarehouseStatus,
    WriteResult,
)

_log = structlog.get_logger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


# Seconds a writer's view of the promoted fields may be old (``fields.promotion`` waits more).
PROMOTED_TTL: Final = 2.0


class Warehouse:
    """The sync's storage; see the module docstring for the transaction rules.

    ``engine`` is injected; ``Warehouse.connect(url)`` builds one with the session settings
    each backend needs.  ``clock`` stamps ``synced_at``, ``updated_at`` and ``quarantined_at``
    only: bookkeeping, never a sync boundary.  ``keep_revisions=False`` switches the revision
    history off: nothing is written to ``record_revisions`` and the write path does no extra
    work at all.  ``sleep`` is the pause before a page transaction that lost a lock
    conflict runs again (``conflicts``).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], datetime] = _utc_now,
        keep_revisions: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        backend = engine.dialect.name
        if backend not in SUPPORTED_BACKENDS:
            raise ConfigurationError(
                f"unsupported warehouse database {backend!r}: use SQLite, PostgreSQL or MariaDB"
            )
        check_driver(backend, engine.dialect.driver)
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})
        self._clock = clock
        self._sleep = sleep
        self._rng = random.Random()  # noqa: S311 - jitter of a retry, not cryptography
        self._ddl: Engine | None = None  # schema changes: built when first needed (``_ddl``)
        # The fields promoted to columns, which every page fills (``fields.promoted``).
        self.promoted_fields = PromotedCache(engine, PROMOTED_TTL)
        self.pages = PageStore(
            engine,
            fence=epochs.check_epoch,
            promoted=self.promoted_fields,
            clock=clock,
            keep_revisions=keep_revisions,
            sleep=sleep,
            rng=self._rng,
        )

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        clock: Callable[[], datetime] = _utc_now,
        keep_revisions: bool = True,
        pool: PoolDemand | None = None,
        on_checkout: Callable[[float], None] | None = None,
        **engine_options: Any,
    ) -> Warehouse:
        """A warehouse on a new engine for ``url``, every wait bounded (``timeouts.WRITES``);
        ``engine_options`` go to create_engine.

        ``pool``: the threads that will use it, which size its connection pool (``pool``);
        ``on_checkout`` then sees how long each checkout waited (the daemon's metric).  An
        in-memory SQLite database keeps SQLAlchemy's one-connection pool.
        """
        if pool is not None:
            parsed = warehouse_url(url)
            if parsed.get_backend_name() != "sqlite" or sqlite_file(parsed) is not None:
                engine_options = {**pool.engine_options(), **engine_options}
        engine = create_warehouse_engine(url, limits=timeouts.WRITES, **engine_options)
        if isinstance(engine.pool, CheckoutTimedPool):
            engine.pool.observe = on_checkout
        return cls(engine, clock=clock, keep_revisions=keep_revisions)

    @classmethod
    def for_reading(
        cls,
        url: str,
        *,
        prepare: Callable[[Engine], None] | None = None,
        limits: timeouts.SessionLimits = timeouts.READS,
    ) -> Warehouse:
        """A warehouse for the read commands (``reader.WarehouseReader`` wraps it): it must
        exist at this version's schema.

        Nothing is created or migrated (a SQLite file that is not there is an error, not a new
        empty warehouse); ``SchemaVersionError`` says which revision is there and what to run.
        ``prepare`` sees the engine before its first connection (the reader makes its sessions
        read-only there).  ``limits``: every wait of its sessions is bounded, so that a read
        command behind a lock says so instead of hanging (``timeouts.READS``; ``PROBE`` for
        ``status --check``).
        """
        engine = create_warehouse_engine(url, limits=limits)
        if prepare is not None:
            prepare(engine)
        path = sqlite_file(engine.url)
        if path is not None and not Path(path).is_file():
            engine.dispose()
            raise ConfigurationError(
                f"no warehouse at {path}: check RECORDSYNC_DATABASE_URL, or start the sync "
                "(`recordsync run`) or `recordsync migrate` to create it"
            )
        warehouse = cls(engine)
        try:
            warehouse.check_schema()
        except BaseException:
            warehouse.close()
            raise
        return warehouse

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def keep_revisions(self) -> bool:
        return self.pages.keep_revisions

    @property
    def concurrent_writes(self) -> bool:
        """Whether page commits may run side by side (``PageStore.concurrent_writes``)."""
        return self.pages.concurrent_writes

    def migrate(self) -> None:
        """Apply every pending Alembic revision (idempotent)."""
        with translate_errors("migrate"):
            upgrade_schema(self._schema_engine())

    def check_schema(self) -> None:
        """Raise ``SchemaVersionError`` unless the schema is the one this version reads.

        Writes nothing: the read commands (``status``, ``report``) run with read-only
        accounts and must never upgrade a production warehouse as a side effect.
        """
        with translate_errors("read schema version"), self._engine.connect() as conn:
            problem = schema_state(conn).problem()
        if problem is not None:
            raise problem

    def ping(self) -> None:
        with translate_errors("ping"), self._engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1").scalar_one()

    def close(self) -> None:
        """Close pooled connections; safe to call twice."""
        if self._ddl is not None and self._ddl is not self._writer:
            self._ddl.dispose()
        self._engine.dispose()

    def _schema_engine(self) -> Engine:
        """Where schema changes run (migrations, BI index builds): sessions without a
        statement limit but with short lock waits (``timeouts.DDL``), opened only when
        needed; on SQLite the writer itself (one writer, no server)."""
        if self._ddl is None:
            if self._engine.dialect.name == "sqlite":
                self._ddl = self._writer
            else:
                self._ddl = create_warehouse_engine(
                    self._engine.url, limits=timeouts.DDL, poolclass=NullPool
                ).execution_options(**{WRITE_OPTION: True})
        return self._ddl

    # -- state (sync_state) ------------------------------------------------------------------

    def load_state(self, merchant_id: str) -> SyncState | None:
        with translate_errors("load state"), self._engine.begin() as conn:
            return sync_state.load_state(conn, merchant_id)

    def load_windows(self, merchant_id: str, job: str) -> list[WindowProgress]:
        """The job's windows ordered by start."""
        with translate_errors("load windows"), self._engine.begin() as conn:
            return sync_state.load_windows(conn, merchant_id, job)

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
        epoch: int | None = None,
    ) -> SyncState:
        """Anchor a (re)build: new tail cursor and a fresh set of rebuild windows, atomically.

        Spec, Records endpoints, "Rebuild without gaps": the anchor cursor is saved before the
        history is read.  Stored rows are kept: the rebuild's snapshot and tail overwrite them
        only with higher revisions.  ``last_sequence`` and ``last_projection_as_of`` are
        cleared because they described the old change cursor.  ``defer_bi_indexes``: leave
        the BI indexes out if ``records`` is empty (the sync decides, ``sync.indexes``).
        """
        sync_state.check_windows(windows)
        now = self._clock()
        with self._write("start rebuild", merchant_id, epoch) as conn:
            state = sync_state.start_rebuild(
                conn,
                merchant_id,
                change_cursor=change_cursor,
                anchor_at=anchor_at,
                history_from=history_from,
                snapshot_to=snapshot_to,
                windows=windows,
                now=now,
            )
        if windows and defer_bi_indexes:
            self._defer_bi_indexes(merchant_id, REBUILD_JOB)
        return state

    def ensure_job(
        self,
        merchant_id: str,
        job: str,
        windows: Sequence[Window],
        *,
        defer_bi_indexes: bool = False,
        epoch: int | None = None,
    ) -> list[WindowProgress]:
        """Register a one-shot backfill's windows once; later calls return its progress.

        Never touches ``sync_state``: a backfill runs beside the tail, not instead of it.  A
        new job into an empty ``records`` with ``defer_bi_indexes`` leaves the BI indexes out
        until it ends (as does ``start_rebuild``; ``build_bi_indexes`` says why).
        """
        if job == REBUILD_JOB:
            raise ValueError("the rebuild job's windows are set by start_rebuild()")
        sync_state.check_windows(windows)
        with self._write("ensure job", merchant_id, epoch) as conn:
            progress, created = sync_state.ensure_job(
                conn, merchant_id, job, windows, now=self._clock()
            )
        if created and defer_bi_indexes:
            self._defer_bi_indexes(merchant_id, job)
        return progress

    def restart_window(
        self, merchant_id: str, job: str, window: Window, *, epoch: int | None = None
    ) -> None:
        """Forget a window's cursor after 410 CURSOR_EXPIRED, so its chain starts over.

        Its record count restarts too: the new chain reads the window from its beginning.
        Rows already stored stay; the new chain rewrites them only with higher revisions.
        """
        with self._write("restart window", merchant_id, epoch) as conn:
            sync_state.restart_window(conn, merchant_id, job, window, now=self._clock())

    def split_window(
        self,
        merchant_id: str,
        job: str,
        window: Window,
        pieces: Sequence[Window],
        *,
        epoch: int | None = None,
    ) -> None:
        """End a window where ``pieces`` begin and add them, in one transaction: its chain
        read everything before the first piece, each piece gets a chain of its own."""
        with self._write("split window", merchant_id, epoch) as conn:
            sync_state.split_window(conn, merchant_id, job, window, pieces, now=self._clock())

    def carry_window(
        self,
        merchant_id: str,
        job: str,
        window: Window,
        following: Window,
        joined: Window,
        *,
        epoch: int | None = None,
    ) -> None:
        """End a window where ``joined`` begins and put ``joined`` in place of the unread
        window after it, in one transaction: one chain reads the rest of both."""
        with self._write("carry window", merchant_id, epoch) as conn:
            sync_state.carry_window(
                conn,
                merchant_id,
                job,
                window,
                following=following,
                joined=joined,
                now=self._clock(),
            )

    # -- pages (pages.store) ---------------------------------------------------------------

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
        epoch: int | None = None,
    ) -> WriteResult:
        """Store one snapshot page and move its window's cursor, in one transaction."""
        page = WindowPage(
            job, window, records, rejected, next_cursor, cursor_issued_at, done, position
        )
        return self.pages.commit_window_pages(merchant_id, [page], epoch=epoch)[0]

    def commit_window_pages(
        self, merchant_id: str, pages: Sequence[WindowPage], epoch: int | None = None
    ) -> list[WriteResult]:
        return self.pages.commit_window_pages(merchant_id, pages, epoch=epoch)

    def commit_tail_page(
        self, merchant_id: str, page: TailPage, *, epoch: int | None = None
    ) -> WriteResult:
        return self.pages.commit_tail_page(merchant_id, page, epoch=epoch)

    def repair_records(
        self,
        merchant_id: str,
        *,
        newer: Sequence[Record],
        same_revision: Sequence[Record],
        epoch: int | None = None,
    ) -> None:
        self.pages.repair_records(
            merchant_id, newer=newer, same_revision=same_revision, epoch=epoch
        )

    # -- the BI indexes (bi_indexes) -----------------------------------------------------------

    def build_bi_indexes(self, merchant_id: str | None = None) -> list[str]:
        """Build the BI indexes of ``records`` that are missing; the names built.

        A new snapshot job into an empty ``records`` drops them (``start_rebuild``,
        ``ensure_job``): a bulk load without them writes about half as much per record
        (bench/README.md, 7).  They are derived data that nothing the sync's correctness rests
        on reads, so building them late only makes reads slower meanwhile.  Idempotent, and
        online where the database can (``bi.indexes``); ``merchant_id`` only names, in the
        log, whose job end or start asked.  A failure other than an outage (an account that
        may not change the schema) is logged and leaves them missing: ``recordsync migrate``
        builds them too.
        """
        started = time.perf_counter()
        try:
            with translate_errors("build BI indexes"):
                built = bi_indexes.build(self._schema_engine(), sleep=self._sleep)
        except (DBAPIError, PermissionDeniedError) as error:
            _log.error(
                "bi_indexes_build_failed",
                merchant_id=merchant_id,
                error=str(getattr(error, "orig", error)),
                action="reports and dashboards run without them: run `recordsync migrate` "
                "with an account that may change the schema",
            )
            return []
        if built:
            _log.info(
                "bi_indexes_built",
                merchant_id=merchant_id,
                indexes=built,
                seconds=round(time.perf_counter() - started, 3),
            )
        return built

    def missing_bi_indexes(self, merchant_id: str | None = None) -> list[str]:
        """The BI indexes of ``records`` to build (absent, or left invalid by a dead build),
        and the retired ones to drop (an older replica built them again); the same for every
        merchant (``merchant_id`` is the sync's port's shape)."""
        with translate_errors("read BI indexes"), self._engine.connect() as conn:
            return [*bi_indexes.missing(conn), *bi_indexes.retired(conn)]

    def _defer_bi_indexes(self, merchant_id: str, job: str) -> None:
        """A new job starts: leave the BI indexes out if ``records`` is empty (a first bulk
        load).  Not deferring is always safe, so a failure here only says so."""
        try:
            with translate_errors("defer BI indexes"):
                dropped = bi_indexes.defer(self._schema_engine())
        except (DBAPIError, PermissionDeniedError, WarehouseUnavailableError) as error:
            _log.warning(
                "bi_indexes_not_deferred",
                merchant_id=merchant_id,
                job=job,
                error=str(error),
                action="the load keeps them up to date as it goes",
            )
            return
        if dropped:
            _log.info(
                "bi_indexes_deferred",
                merchant_id=merchant_id,
                job=job,
                indexes=dropped,
                until="the job's last window is done",
            )

    # -- the game catalogue (catalogue) ---------------------------------------------------------

    def commit_catalogue(
        self,
        merchant_id: str,
        games: Sequence[Game],
        *,
        kept_ids: Collection[str] = (),
        epoch: int | None = None,
    ) -> CatalogueResult:
        """Store one whole catalogue pass in one transaction (``catalogue`` says how)."""
        now = self._clock()
        with self._write("commit catalogue", merchant_id, epoch) as conn:
            return catalogue.commit_pass(conn, merchant_id, games, kept_ids=kept_ids, now=now)

    def record_availability(
        self, merchant_id: str, seen: EndpointAvailability, *, epoch: int | None = None
    ) -> None:
        """Store whether the platform serves ``seen.endpoint`` to the merchant (``availability``
        says how ``since`` moves)."""
        now = self._clock()
        with self._write("record endpoint availability", merchant_id, epoch) as conn:
            availability.record(conn, merchant_id, seen, now=now)

    def availability(self, merchant_id: str) -> list[Availability]:
        """The optional endpoints recorded for the merchant (``recordsync status``)."""
        with translate_errors("read endpoint availability"), self._engine.begin() as conn:
            return availability.read(conn, merchant_id)

    def game_names(self, merchant_id: str) -> dict[str, GameName]:
        """game_id -> its name and provider from the catalogue (every game ever listed)."""
        with translate_errors("read game names"), self._engine.begin() as conn:
            return catalogue.game_names(conn, merchant_id)

    @contextmanager
    def _write(self, action: str, merchant_id: str, epoch: int | None) -> Iterator[Connection]:
        """One write transaction; with an ``epoch``, fenced by its first statement."""
        with translate_errors(action), self._writer.begin() as conn:
            if epoch is not None:
                epochs.check_epoch(conn, merchant_id, epoch, action=action)
            yield conn

    # -- reading (reads) ---------------------------------------------------------------------

    def quarantined(self, merchant_id: str, limit: int = 20) -> list[QuarantinedRecord]:
        """The newest quarantined items first."""
        with translate_errors("read quarantine"), self._engine.begin() as conn:
            return reads.quarantined(conn, merchant_id, limit)

    def status(
        self, merchant_id: str, *, count_cap: int = reads.STATUS_COUNT_CAP
    ) -> WarehouseStatus:
        """Where the merchant's sync stands; its rows counted exactly up to ``count_cap``."""
        with translate_errors("read status"), self._engine.begin() as conn:
            return reads.status(conn, merchant_id, count_cap=count_cap)

    def stored_revisions(self, merchant_id: str, record_ids: Collection[str]) -> dict[str, int]:
        """record_id -> revision held in ``records``, for the ids that exist (the drift check
        compares them with the platform's)."""
        with translate_errors("read stored revisions"), self._engine.begin() as conn:
            return reads.stored_revisions(conn, merchant_id, record_ids)

    def stored_records(self, merchant_id: str, record_ids: Collection[str]) -> dict[str, Record]:
        """record_id -> the stored row as a ``Record``, for the ids that exist (``verify``
        compares them with the platform's field by field)."""
        with translate_errors("read stored records"), self._engine.begin() as conn:
            return reads.stored_records(conn, merchant_id, record_ids)

    def count_created(self, merchant_id: str, start: datetime, end: datetime) -> int:
        """How many stored rows were created in ``[start, end)``, counted by the database."""
        with translate_errors("count records"), self._engine.begin() as conn:
            return reads.count_created(conn, merchant_id, start, end)

    def record_ids_created(self, merchant_id: str, start: datetime, end: datetime) -> list[str]:
        """The ids of the stored rows created in ``[start, end)`` (``verify`` looks for rows
        the platform does not list)."""
        with translate_errors("read record ids"), self._engine.begin() as conn:
            return reads.record_ids_created(conn, merchant_id, start, end)

    # -- the BI views (docs/bi.md; summaries) ---------------------------------------------------

    def newest_record_day(self, merchant_id: str) -> date | None:
        """The UTC day of the merchant's newest record (by created_at); None when there is none.

        Reports count their days back from here, not from the local clock: a warehouse
        restored from a backup, or a sync that stopped, still reports its latest data.
        """
        with translate_errors("read newest day"), self._engine.begin() as conn:
            return summaries.newest_record_day(conn, merchant_id)

    def daily_summaries(
        self, merchant_id: str, *, per: str, first_day: date, last_day: date
    ) -> list[DailySummary]:
        """``daily_game_summary`` (per="game") or ``daily_player_summary`` (per="player")
        rows for the UTC days ``first_day`` to ``last_day`` inclusive."""
        with translate_errors("read daily summaries"), self._engine.begin() as conn:
            return summaries.daily_summaries(
                conn, merchant_id, per=per, first_day=first_day, last_day=last_day
            )

    def note_drift_check(self, merchant_id: str, *, deferred: bool, epoch: int | None) -> None:
        """The merchant's drift check ran, or began to wait (``drift_checks``)."""
        with self._write("note drift check", merchant_id, epoch) as conn:
            drift_checks.note(conn, merchant_id, deferred=deferred)

    def prune_revisions(
        self,
        merchant_id: str,
        after: RevisionKey | None,
        *,
        retention: timedelta,
        epoch: int | None,
        limit: int = revision_retention.BATCH,
    ) -> PrunedBatch:
        """One batch of a sweep of the merchant's ``record_revisions`` (``revision_retention``):
        the next ``limit`` keys after ``after`` read without a lock, then the expired ones
        among them deleted by key in a short transaction of their own, fenced by ``epoch``."""
        with translate_errors("read revisions"), self._engine.begin() as conn:
            scanned = revision_retention.scan(conn, merchant_id, after, limit)
            current = revision_retention.current_revisions(conn, merchant_id, scanned)
            cutoff = revision_retention.cutoff(conn, retention)
        keys = revision_retention.expired(scanned, current, cutoff)
        deleted = 0
        if keys:
            with self._write("prune revisions", merchant_id, epoch) as conn:
                deleted = revision_retention.delete_keys(conn, merchant_id, keys)
        last = scanned[-1].key if len(scanned) == limit else None
        return PrunedBatch(last=last, scanned=len(scanned), deleted=deleted)

    def drift_check_run(self, merchant_id: str) -> DriftCheckRun | None:
        """When the merchant's drift check last ran and since when it waits; None: never."""
        with translate_errors("read drift checks"), self._engine.begin() as conn:
            return drift_checks.last_run(conn, merchant_id)

    def fields(self) -> FieldsView:
        """The promoted fields and the unknown ones (``recordsync fields list``)."""
        with translate_errors("read fields"):
            return promotion.list_fields(self._engine)

    def promotion_plan(self, field: str, kind: str) -> PromotionPlan:
        """What promoting ``field`` would do: the rows carrying it now."""
        with translate_errors("read promotion"):
            return promotion.plan(self._engine, field, kind)

    def promote_field(
        self,
        field: str,
        kind: str,
        *,
        batch: int = promotion.BATCH,
        on_batch: Callable[[int, int], None] | None = None,
    ) -> PromotionResult:
        """Promote ``field`` to a column of type ``kind`` (``fields.promotion``), waiting for
        every writer to see it first (twice its view's age and a page's transaction)."""
        with translate_errors("promote field"):
            return promotion.promote(
                self._schema_engine(),
                field,
                kind,
                settle=2 * self.promoted_fields.ttl + 1.0,
                sleep=self._sleep,
                batch=batch,
                on_batch=on_batch,
            )

    def unknown_fields(self, merchant_id: str) -> list[Sighting]:
        """The record members the merchant's pages carried that recordsync does not know."""
        with translate_errors("read unknown fields"), self._engine.begin() as conn:
            return read_sightings(conn, merchant_id)

    def freshness(self, merchant_id: str) -> Freshness | None:
        """The merchant's row of ``sync_freshness``; None before the first (re)build."""
        with translate_errors("read freshness"), self._engine.begin() as conn:
            return summaries.freshness(conn, merchant_id)

    # -- the fleet (lease, requests) -------------------------------------------------

    def fleet_session(
        self,
        replica_id: str,
        *,
        lease_seconds: int = timeouts.LEASE_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
        on_lost: Callable[[frozenset[str]], None] | None = None,
        holding: bool = True,
    ) -> FleetSession:
        """This process's session in the fleet sharing the merchants, as ``replica_id``.

        Its locks live on ONE connection of its own, built from this engine's URL (a file lock
        on SQLite).  ``lease_seconds`` bounds how long the server lets a silent holder (paused,
        partitioned) keep its locks; the caller's heartbeat, every ~2 s, keeps a live one's.
        ``sleep`` is what ``wait_for_change`` does where the database cannot notify;
        ``on_lost`` is told, from the session's keeper thread, of merchants whose lock is gone.
        ``holding=False``: a session that only asks who holds what (``status``), never holds;
        any other is refused where the lease cannot hold (``lease.support``, exit 2).
        """
        if holding and self._engine.dialect.name != "sqlite":
            with translate_errors("check the server's version"), self._engine.connect() as conn:
                support.check_server(conn)
        locks = merchant_locks(
            self._engine.url, owner=replica_id, lease_seconds=lease_seconds, holding=holding
        )
        return FleetSession(
            self._engine,
            locks,
            replica_id,
            sleep=sleep,
            lease_seconds=lease_seconds,
            on_lost=on_lost,
        )

    def fenced(self, merchant_id: str, epoch: int) -> MerchantStore:
        """The sync's store for ``merchant_id`` held at ``epoch``: every write is fenced."""
        return MerchantStore(self, merchant_id, epoch)

    def for_merchant(self, merchant_id: str) -> MerchantStore:
        """The sync's store for ``merchant_id``, unfenced: for a sync that holds no lease (the
        demo, a test); a holder's sync writes through ``fenced``."""
        return MerchantStore(self, merchant_id, None)

    def lease_epoch(self, merchant_id: str) -> int | None:
        """The merchant's current lease epoch; None when no replica ever held it."""
        with translate_errors("read lease epoch"), self._engine.begin() as conn:
            return epochs.current_epoch(conn, merchant_id)

    @property
    def controls(self) -> ControlStore:
        """What operators set on a merchant that every replica obeys (``controls``: pause)."""
        return ControlStore(self._engine)

    @property
    def state_transfer(self) -> StateTransfer:
        """The merchant's sync state read and written whole (``state_transfer``)."""
        return StateTransfer(self._engine)

    @property
    def summaries(self) -> SummaryStore:
        """The rollups behind the daily summary views: folding and building (``bi.rollups``)."""
        return SummaryStore(
            self._engine,
            retry=lambda work: retry_lost_conflicts(work, sleep=self._sleep, rng=self._rng),
        )

    @property
    def requests(self) -> RequestStore:
        """The work commands hand to a merchant's holder (``requests.book``)."""
        return RequestStore(self._engine)

    # -- round-end notifications (round_events) -----------------------------------------------

    def record_round_event(self, event: RoundEvent, *, received_by: str) -> RoundEventReceipt:
        """Store a verified notification once per merchant; a repeated ``event_id`` of the
        merchant gets the first one's receipt and changes nothing.  ``received_at`` is this
        warehouse's clock."""
        try:
            with translate_errors("record round event"), self._writer.begin() as conn:
                return round_events.record(
                    conn, event, received_at=self._clock(), received_by=received_by
                )
        except IntegrityError:
            # Another replica stored the same event a moment ago: answer with its receipt.
            with translate_errors("record round event"), self._engine.begin() as conn:
                known = round_events.find(conn, event.merchant_id, event.event_id)
            if known is None:
                raise
            return known

    def rounds_announced_missing(self, merchant_id: str, grace_seconds: float) -> list[str]:
        """Round ids announced more than ``grace_seconds`` ago (by this warehouse's clock)
        that ``records`` still lacks; rounds found meanwhile are marked and not asked again."""
        now = self._clock()
        with translate_errors("cross-check round events"), self._writer.begin() as conn:
            return round_events.missing_rounds(
                conn, merchant_id, cutoff=now - timedelta(seconds=grace_seconds), now=now
            )

    def round_event_feed(
        self,
        replica_id: str,
        *,
        poll_interval: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> round_events.RoundEventFeed:
        """What tells ``replica_id`` of the notifications other replicas accepted: a LISTEN
        on PostgreSQL (its own connection), a poll of ``round_events`` elsewhere."""
        if self._engine.dialect.name == "postgresql":
            return round_events.PostgresFeed(self._engine.url, replica_id)
        return round_events.PollFeed(self._engine, replica_id, interval=poll_interval, sleep=sleep)

    # -- for the demo's comparison (and the tests') -------------------------------------------

    def fetch_records(self, merchant_id: str) -> dict[str, dict[str, Any]]:
        """Every stored row of the merchant by record_id (the demo compares it with the
        simulator's truth)."""
        with translate_errors("fetch records"), self._engine.begin() as conn:
            return reads.fetch_records(conn, merchant_id)
