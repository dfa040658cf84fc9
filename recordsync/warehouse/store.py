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
from sqlalchemy.pool import NullPool

from recordsync.core.database_url import SUPPORTED_BACKENDS, check_driver
from recordsync.core.errors import (
    ConfigurationError,
)
from recordsync.core.models import Game, Record
from recordsync.core.retention import PrunedBatch, RevisionKey
from recordsync.core.round_events import RoundEvent, RoundEventReceipt
from recordsync.core.state import (
    EndpointAvailability,
    SyncState,
    TailPage,
    Window,
    WindowPage,
    WindowProgress,
)
from recordsync.warehouse import (
    reads,
    revision_retention,
    round_events,
    timeouts,
)
from recordsync.warehouse.bi.rollups import SummaryStore
from recordsync.warehouse.bi.store import BIStore
from recordsync.warehouse.catalogue import GameStore
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
from recordsync.warehouse.record_store import RecordStore
from recordsync.warehouse.requests.store import RequestStore
from recordsync.warehouse.round_events import RoundEventStore
from recordsync.warehouse.state_store import StateStore
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
        self.bi = BIStore(engine, schema_engine=self._schema_engine, sleep=sleep)
        self.state = StateStore(engine, clock=clock, defer_bi_indexes=self.bi.defer_bi_indexes)
        self.games = GameStore(engine, clock=clock)
        self.events = RoundEventStore(engine, clock=clock)
        self.records = RecordStore(engine)
        # The rollups behind the daily summary views: folding and building (``bi.rollups``).
        self.summaries = SummaryStore(
            engine,
            retry=lambda work: retry_lost_conflicts(work, sleep=self._sleep, rng=self._rng),
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
        return self.state.load_state(merchant_id)

    def load_windows(self, merchant_id: str, job: str) -> list[WindowProgress]:
        return self.state.load_windows(merchant_id, job)

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
        return self.state.start_rebuild(
            merchant_id,
            change_cursor=change_cursor,
            anchor_at=anchor_at,
            history_from=history_from,
            snapshot_to=snapshot_to,
            windows=windows,
            defer_bi_indexes=defer_bi_indexes,
            epoch=epoch,
        )

    def ensure_job(
        self,
        merchant_id: str,
        job: str,
        windows: Sequence[Window],
        *,
        defer_bi_indexes: bool = False,
        epoch: int | None = None,
    ) -> list[WindowProgress]:
        return self.state.ensure_job(
            merchant_id, job, windows, defer_bi_indexes=defer_bi_indexes, epoch=epoch
        )

    def restart_window(
        self, merchant_id: str, job: str, window: Window, *, epoch: int | None = None
    ) -> None:
        self.state.restart_window(merchant_id, job, window, epoch=epoch)

    def split_window(
        self,
        merchant_id: str,
        job: str,
        window: Window,
        pieces: Sequence[Window],
        *,
        epoch: int | None = None,
    ) -> None:
        self.state.split_window(merchant_id, job, window, pieces, epoch=epoch)

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
        self.state.carry_window(merchant_id, job, window, following, joined, epoch=epoch)

    # -- pages (pages.store) ---------------------------------------------------------------

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
        return self.bi.build_bi_indexes(merchant_id)

    def missing_bi_indexes(self, merchant_id: str | None = None) -> list[str]:
        return self.bi.missing_bi_indexes(merchant_id)

    # -- the game catalogue (catalogue) ---------------------------------------------------------

    def commit_catalogue(
        self,
        merchant_id: str,
        games: Sequence[Game],
        *,
        kept_ids: Collection[str] = (),
        epoch: int | None = None,
    ) -> CatalogueResult:
        return self.games.commit_catalogue(merchant_id, games, kept_ids=kept_ids, epoch=epoch)

    def record_availability(
        self, merchant_id: str, seen: EndpointAvailability, *, epoch: int | None = None
    ) -> None:
        self.games.record_availability(merchant_id, seen, epoch=epoch)

    def availability(self, merchant_id: str) -> list[Availability]:
        return self.games.availability(merchant_id)

    def game_names(self, merchant_id: str) -> dict[str, GameName]:
        return self.games.game_names(merchant_id)

    @contextmanager
    def _write(self, action: str, merchant_id: str, epoch: int | None) -> Iterator[Connection]:
        """One write transaction; with an ``epoch``, fenced by its first statement."""
        with translate_errors(action), self._writer.begin() as conn:
            if epoch is not None:
                epochs.check_epoch(conn, merchant_id, epoch, action=action)
            yield conn

    # -- reading (reads) ---------------------------------------------------------------------

    def quarantined(self, merchant_id: str, limit: int = 20) -> list[QuarantinedRecord]:
        return self.records.quarantined(merchant_id, limit)

    def status(
        self, merchant_id: str, *, count_cap: int = reads.STATUS_COUNT_CAP
    ) -> WarehouseStatus:
        return self.records.status(merchant_id, count_cap=count_cap)

    def stored_revisions(self, merchant_id: str, record_ids: Collection[str]) -> dict[str, int]:
        return self.records.stored_revisions(merchant_id, record_ids)

    def stored_records(self, merchant_id: str, record_ids: Collection[str]) -> dict[str, Record]:
        return self.records.stored_records(merchant_id, record_ids)

    def count_created(self, merchant_id: str, start: datetime, end: datetime) -> int:
        return self.records.count_created(merchant_id, start, end)

    def record_ids_created(self, merchant_id: str, start: datetime, end: datetime) -> list[str]:
        return self.records.record_ids_created(merchant_id, start, end)

    # -- the BI views (docs/bi.md; summaries) ---------------------------------------------------

    def newest_record_day(self, merchant_id: str) -> date | None:
        return self.bi.newest_record_day(merchant_id)

    def daily_summaries(
        self, merchant_id: str, *, per: str, first_day: date, last_day: date
    ) -> list[DailySummary]:
        return self.bi.daily_summaries(merchant_id, per=per, first_day=first_day, last_day=last_day)

    def note_drift_check(self, merchant_id: str, *, deferred: bool, epoch: int | None) -> None:
        self.state.note_drift_check(merchant_id, deferred=deferred, epoch=epoch)

    def prune_revisions(
        self,
        merchant_id: str,
        after: RevisionKey | None,
        *,
        retention: timedelta,
        epoch: int | None,
        limit: int = revision_retention.BATCH,
    ) -> PrunedBatch:
        return self.records.prune_revisions(
            merchant_id, after, retention=retention, epoch=epoch, limit=limit
        )

    def drift_check_run(self, merchant_id: str) -> DriftCheckRun | None:
        return self.state.drift_check_run(merchant_id)

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
        return self.bi.freshness(merchant_id)

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
        return self._merchant_store(merchant_id, epoch)

    def for_merchant(self, merchant_id: str) -> MerchantStore:
        """The sync's store for ``merchant_id``, unfenced: for a sync that holds no lease (the
        demo, a test); a holder's sync writes through ``fenced``."""
        return self._merchant_store(merchant_id, None)

    def _merchant_store(self, merchant_id: str, epoch: int | None) -> MerchantStore:
        return MerchantStore(
            merchant_id,
            epoch,
            state=self.state,
            pages=self.pages,
            records=self.records,
            bi=self.bi,
            summaries=self.summaries,
            games=self.games,
            events=self.events,
        )

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
    def requests(self) -> RequestStore:
        """The work commands hand to a merchant's holder (``requests.book``)."""
        return RequestStore(self._engine)

    # -- round-end notifications (round_events) -----------------------------------------------

    def record_round_event(self, event: RoundEvent, *, received_by: str) -> RoundEventReceipt:
        return self.events.record_round_event(event, received_by=received_by)

    def rounds_announced_missing(self, merchant_id: str, grace_seconds: float) -> list[str]:
        return self.events.rounds_announced_missing(merchant_id, grace_seconds)

    def round_event_feed(
        self,
        replica_id: str,
        *,
        poll_interval: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> round_events.RoundEventFeed:
        return self.events.round_event_feed(replica_id, poll_interval=poll_interval, sleep=sleep)

    # -- for the demo's comparison (and the tests') -------------------------------------------

    def fetch_records(self, merchant_id: str) -> dict[str, dict[str, Any]]:
        return self.records.fetch_records(merchant_id)
