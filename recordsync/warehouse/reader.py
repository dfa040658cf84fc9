"""The warehouse as the read commands (``status``, ``report``, ``status --check``) see it: it
cannot write.

It offers the reads those commands make and nothing else, so no write is one call away, and
its database sessions are read-only as well (SQLite ``query_only``; a read-only transaction
default on PostgreSQL and MariaDB): a read command pointed at a production warehouse cannot
change it, whatever code it reaches.  Nothing is created or migrated: the warehouse must exist
at this version's schema.  Every wait is bounded (``timeouts.READS``, ``PROBE``): a read
command behind a lock ends with a line saying so.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import date, datetime
from typing import Any, Final

from sqlalchemy import Engine, event

from recordsync.core.state import SyncState
from recordsync.warehouse.fields.sightings import Sighting
from recordsync.warehouse.store import Warehouse
from recordsync.warehouse.timeouts import READS, SessionLimits
from recordsync.warehouse.values import (
    Availability,
    DailySummary,
    DriftCheckRun,
    Freshness,
    GameName,
    Pause,
    QuarantinedRecord,
    WarehouseStatus,
)

_READ_ONLY: Final = {
    "sqlite": "PRAGMA query_only = ON",
    "postgresql": "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
    "mysql": "SET SESSION TRANSACTION READ ONLY",
    "mariadb": "SET SESSION TRANSACTION READ ONLY",
}


class WarehouseReader:
    """The reads of the read commands, on sessions that cannot write (module docstring)."""

    def __init__(self, warehouse: Warehouse) -> None:
        self._warehouse = warehouse

    @classmethod
    def open(cls, url: str, *, limits: SessionLimits = READS) -> WarehouseReader:
        """A reader of the warehouse at ``url``; ``SchemaVersionError`` or
        ``ConfigurationError`` when there is none at this version's schema.  Every wait of
        its sessions is bounded by ``limits`` (``timeouts``): a lock wait, a statement, a
        connection; ``PROBE`` for a health check."""
        warehouse = Warehouse.for_reading(url, prepare=_read_only_sessions, limits=limits)
        return cls(warehouse)

    @property
    def engine(self) -> Engine:
        """The reader's engine; every session of it refuses writes."""
        return self._warehouse.engine

    def load_state(self, merchant_id: str) -> SyncState | None:
        return self._warehouse.state.load_state(merchant_id)

    def status(self, merchant_id: str) -> WarehouseStatus:
        return self._warehouse.records.status(merchant_id)

    def quarantined(self, merchant_id: str, limit: int = 20) -> list[QuarantinedRecord]:
        return self._warehouse.records.quarantined(merchant_id, limit=limit)

    def lease_epoch(self, merchant_id: str) -> int | None:
        return self._warehouse.lease_epoch(merchant_id)

    def freshness(self, merchant_id: str) -> Freshness | None:
        return self._warehouse.bi.freshness(merchant_id)

    def drift_check_run(self, merchant_id: str) -> DriftCheckRun | None:
        return self._warehouse.state.drift_check_run(merchant_id)

    def unknown_fields(self, merchant_id: str) -> list[Sighting]:
        return self._warehouse.fields.unknown_fields(merchant_id)

    def availability(self, merchant_id: str) -> list[Availability]:
        return self._warehouse.games.availability(merchant_id)

    def newest_record_day(self, merchant_id: str) -> date | None:
        return self._warehouse.bi.newest_record_day(merchant_id)

    def daily_summaries(
        self, merchant_id: str, *, per: str, first_day: date, last_day: date
    ) -> list[DailySummary]:
        return self._warehouse.bi.daily_summaries(
            merchant_id, per=per, first_day=first_day, last_day=last_day
        )

    def game_names(self, merchant_id: str) -> dict[str, GameName]:
        return self._warehouse.games.game_names(merchant_id)

    def count_created(self, merchant_id: str, start: datetime, end: datetime) -> int:
        """The stored rows created in ``[start, end)`` (a dry run's estimate), counted by the
        database: no id is loaded, whatever the window holds."""
        return self._warehouse.records.count_created(merchant_id, start, end)

    def paused(self, merchant_ids: Collection[str]) -> dict[str, Pause]:
        return self._warehouse.controls.paused(merchant_ids)

    def holders(self, asked_by: str) -> dict[str, str]:
        """merchant -> the replica whose lock holds it right now, asked through a session of
        ``asked_by`` that only reads: it never holds, heartbeats or writes."""
        session = self._warehouse.fleet_session(asked_by, holding=False)
        try:
            return session.holders()
        finally:
            session.close()

    def close(self) -> None:
        self._warehouse.close()


def _read_only_sessions(engine: Any) -> None:
    statement = _READ_ONLY[engine.dialect.name]

    @event.listens_for(engine, "connect")
    def _read_only(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(statement)
        finally:
            cursor.close()
        if engine.dialect.name == "postgresql":
            # psycopg opened a transaction for the SET: a rollback (the pool's reset) would
            # undo it, so it is committed at once.
            dbapi_connection.commit()
