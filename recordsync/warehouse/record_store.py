"""The record store: what was stored for each merchant (``reads``: status, quarantine,
stored revisions and rows) and the sweep of its superseded revisions (``revision_retention``),
each call one transaction of its own, its errors translated."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from recordsync.core.models import Record
from recordsync.core.retention import PrunedBatch, RevisionKey
from recordsync.warehouse import reads, revision_retention
from recordsync.warehouse.connection import WRITE_OPTION, translate_errors
from recordsync.warehouse.fencing import fenced_write
from recordsync.warehouse.values import QuarantinedRecord, WarehouseStatus


class RecordStore:
    """The stored records on the warehouse's engine (module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})

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

    def fetch_records(self, merchant_id: str) -> dict[str, dict[str, Any]]:
        """Every stored row of the merchant by record_id (the demo compares it with the
        simulator's truth)."""
        with translate_errors("fetch records"), self._engine.begin() as conn:
            return reads.fetch_records(conn, merchant_id)

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
            with fenced_write(self._writer, "prune revisions", merchant_id, epoch) as conn:
                deleted = revision_retention.delete_keys(conn, merchant_id, keys)
        last = scanned[-1].key if len(scanned) == limit else None
        return PrunedBatch(last=last, scanned=len(scanned), deleted=deleted)
