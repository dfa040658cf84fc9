"""The warehouse's root: it connects, migrates, pings and closes, and hands out a store per
concept, all over its one engine.

Each store runs every read or write in ONE transaction of its own and raises any "server
gone" error as ``WarehouseUnavailableError`` (see ``connection``) after the transaction has
rolled back; the caller waits and tries again.  The stores: ``state`` (where each merchant's
sync stands, ``state_store``), ``pages`` (a page's rows with the cursor that covers them,
``pages.store``), ``records`` (what was stored, ``record_store``), ``bi`` and ``summaries``
(the BI indexes and views, the rollups behind them, ``bi``), ``fields`` (the record members
the platform added, ``fields``), ``games`` (the catalogue,
``catalogue``), ``events`` (round-end notifications, ``round_events``), ``requests``,
``controls`` and ``state_transfer``.  A merchant's store as its sync sees it
(``merchant_store``) is built over them, bound to the merchant and fenced by its holder's
epoch (``fencing``); ``lease`` is the protocol by which processes share the merchants (its
session's locks live on a connection of their own).

The warehouse never calls the platform and never decides what to read next: it stores what
the sync hands it and answers what was stored.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import structlog
from sqlalchemy import Engine
from sqlalchemy.pool import NullPool

from recordsync.core.database_url import SUPPORTED_BACKENDS, check_driver
from recordsync.core.errors import ConfigurationError
from recordsync.warehouse import timeouts
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
from recordsync.warehouse.fields.promoted import PromotedCache
from recordsync.warehouse.fields.store import FieldStore
from recordsync.warehouse.lease import FleetSession, epochs, support
from recordsync.warehouse.lease.backends import merchant_locks
from recordsync.warehouse.merchant_store import MerchantStore, StoreParts
from recordsync.warehouse.pages.conflicts import retry_lost_conflicts
from recordsync.warehouse.pages.store import PageStore
from recordsync.warehouse.pool import CheckoutTimedPool, PoolDemand
from recordsync.warehouse.record_store import RecordStore
from recordsync.warehouse.requests.store import RequestStore
from recordsync.warehouse.round_events import RoundEventStore
from recordsync.warehouse.schema_version import schema_state
from recordsync.warehouse.state_store import StateStore
from recordsync.warehouse.state_transfer import StateTransfer

_log = structlog.get_logger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


# Seconds a writer's view of the promoted fields may be old (``fields.promotion`` waits more).
PROMOTED_TTL: Final = 2.0


class Warehouse:
    """The sync's storage, as stores per concept over one engine (module docstring).

    ``engine`` is injected; ``Warehouse.connect(url)`` builds one with the session settings
    each backend needs.  ``clock`` (the stores') stamps ``synced_at``, ``updated_at`` and
    ``quarantined_at`` only: bookkeeping, never a sync boundary.  ``keep_revisions=False``
    switches the revision history off: nothing is written to ``record_revisions`` and the
    write path does no extra work at all.  ``sleep`` is the pause before a page transaction
    that lost a lock conflict runs again (``conflicts``).  ``lease_seconds``: the lease of this
    process's fleet sessions (``fleet_session``), which its engine's bounds were built for.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], datetime] = _utc_now,
        keep_revisions: bool = True,
        sleep: Callable[[float], None] = time.sleep,
        lease_seconds: int = timeouts.LEASE_SECONDS,
    ) -> None:
        backend = engine.dialect.name
        if backend not in SUPPORTED_BACKENDS:
            raise ConfigurationError(
                f"unsupported warehouse database {backend!r}: use SQLite, PostgreSQL or MariaDB"
            )
        check_driver(backend, engine.dialect.driver)
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})
        self._lease_seconds = lease_seconds
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
        self.fields = FieldStore(
            engine, schema_engine=self._schema_engine, promoted=self.promoted_fields, sleep=sleep
        )
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
        lease_seconds: int = timeouts.LEASE_SECONDS,
        **engine_options: Any,
    ) -> Warehouse:
        """A warehouse on a new engine for ``url``, every wait bounded (``timeouts.WRITES``,
        for a lease of ``lease_seconds``: ``timeouts.writes``, and its fleet sessions'
        lease); ``engine_options`` go to create_engine.

        ``pool``: the threads that will use it, which size its connection pool (``pool``);
        ``on_checkout`` then sees how long each checkout waited (the daemon's metric).  An
        in-memory SQLite database keeps SQLAlchemy's one-connection pool.
        """
        if pool is not None:
            parsed = warehouse_url(url)
            if parsed.get_backend_name() != "sqlite" or sqlite_file(parsed) is not None:
                engine_options = {**pool.engine_options(), **engine_options}
        limits = timeouts.writes(lease_seconds)
        engine = create_warehouse_engine(url, limits=limits, **engine_options)
        if isinstance(engine.pool, CheckoutTimedPool):
            engine.pool.observe = on_checkout
        return cls(engine, clock=clock, keep_revisions=keep_revisions, lease_seconds=lease_seconds)

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

    def migrate(self) -> None:
        """Apply every pending Alembic revision (idempotent).  Alembic is imported here, by
        the processes that may change the schema, not by every one that reads it."""
        from recordsync.warehouse.migrate import upgrade  # noqa: PLC0415 - see the docstring

        with translate_errors("migrate"):
            upgrade(self._schema_engine())

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

    # -- the fleet (lease, requests) -------------------------------------------------

    def fleet_session(
        self,
        replica_id: str,
        *,
        lease_seconds: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        on_lost: Callable[[frozenset[str]], None] | None = None,
        holding: bool = True,
    ) -> FleetSession:
        """This process's session in the fleet sharing the merchants, as ``replica_id``.

        Its locks live on ONE connection of its own, built from this engine's URL (a file lock
        on SQLite).  ``lease_seconds`` (the warehouse's lease unless given) bounds how long the
        server lets a silent holder (paused, partitioned) keep its locks; the caller's
        heartbeat, every tick, and the session's keeper keep a live one's.
        ``sleep`` is what ``wait_for_change`` does where the database cannot notify;
        ``on_lost`` is told, from the session's keeper thread, of merchants whose lock is gone.
        ``holding=False``: a session that only asks who holds what (``status``), never holds;
        any other is refused where the lease cannot hold (``lease.support``, exit 2).
        """
        if lease_seconds is None:
            lease_seconds = self._lease_seconds
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
        return MerchantStore(merchant_id, epoch, self.store_parts())

    def store_parts(self) -> StoreParts:
        """The stores a merchant's store stands on (a test's store of its own takes them)."""
        return StoreParts(
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
