"""Answering what was stored: status, quarantine, stored revisions, and whole rows for tests.

The BI views are read by ``summaries``.  Every function runs inside the transaction the
record store (``record_store``) opened for it.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Column, Connection, case, func, literal, select

from recordsync.core.models import Record
from recordsync.warehouse import sync_state
from recordsync.warehouse.schema import (
    quarantined_records,
    records,
    snapshot_windows,
)
from recordsync.warehouse.values import JobStatus, QuarantinedRecord, WarehouseStatus

# ``status`` counts a merchant's rows exactly up to here, and says "more than" beyond: an
# exact count of tens of millions of rows takes seconds, and ``status`` answers in one.
STATUS_COUNT_CAP: Final = 100_000
IN_LIST_CHUNK: Final = 500  # keep IN lists well under every backend's parameter limit
# The columns of ``records`` that make a ``Record`` (the rest is bookkeeping: synced_at, units).
_RECORD_COLUMNS: Final = tuple(records.c[name] for name in Record.__struct_fields__)


def status(
    conn: Connection, merchant_id: str, *, count_cap: int = STATUS_COUNT_CAP
) -> WarehouseStatus:
    state = sync_state.load_state(conn, merchant_id)
    windows = snapshot_windows.c
    job_query = (
        select(
            windows.job,
            func.count(),
            func.sum(case((windows.done, 1), else_=0)),
            func.sum(windows.records),
        )
        .where(windows.merchant_id == merchant_id)
        .group_by(windows.job)
        .order_by(windows.job)
    )
    # MariaDB's SUM() returns DECIMAL: int() makes every backend alike.
    jobs = tuple(
        JobStatus(
            job=job,
            windows_total=int(total),
            windows_done=int(finished or 0),
            records=int(count or 0),
        )
        for job, total, finished, count in conn.execute(job_query)
    )
    counted = _count_up_to(conn, merchant_id, count_cap)
    return WarehouseStatus(
        merchant_id=merchant_id,
        state=state,
        jobs=jobs,
        records=min(counted, count_cap),
        records_exact=counted <= count_cap,
        quarantined=_count(conn, quarantined_records.c.merchant_id, merchant_id),
    )


def _count_up_to(conn: Connection, merchant_id: str, cap: int) -> int:
    """The merchant's rows, counted up to ``cap`` + 1 at most (an index range that stops
    there): whatever the table holds, ``status`` reads at most that many index entries."""
    capped = select(literal(1)).where(records.c.merchant_id == merchant_id).limit(cap + 1)
    query = select(func.count()).select_from(capped.subquery())
    return int(conn.execute(query).scalar_one())


def quarantined(conn: Connection, merchant_id: str, limit: int) -> list[QuarantinedRecord]:
    query = (
        select(quarantined_records)
        .where(quarantined_records.c.merchant_id == merchant_id)
        .order_by(quarantined_records.c.id.desc())
        .limit(limit)
    )
    return [
        QuarantinedRecord(
            id=row.id,
            merchant_id=row.merchant_id,
            source=row.source,
            position=row.position,
            record_id=row.record_id,
            reason=row.reason,
            raw_json=row.raw_json,
            quarantined_at=row.quarantined_at,
        )
        for row in conn.execute(query)
    ]


def stored_revisions(
    conn: Connection, merchant_id: str, record_ids: Collection[str]
) -> dict[str, int]:
    """record_id -> revision held in ``records``, for the ids that exist."""
    ids = list(record_ids)
    found: dict[str, int] = {}
    for start in range(0, len(ids), IN_LIST_CHUNK):
        query = select(records.c.record_id, records.c.revision).where(
            records.c.merchant_id == merchant_id,
            records.c.record_id.in_(ids[start : start + IN_LIST_CHUNK]),
        )
        found.update({row.record_id: row.revision for row in conn.execute(query)})
    return found


def stored_records(
    conn: Connection, merchant_id: str, record_ids: Collection[str]
) -> dict[str, Record]:
    """record_id -> the row held in ``records`` as a ``Record``, for the ids that exist."""
    ids = list(record_ids)
    found: dict[str, Record] = {}
    for start in range(0, len(ids), IN_LIST_CHUNK):
        query = select(*_RECORD_COLUMNS).where(
            records.c.merchant_id == merchant_id,
            records.c.record_id.in_(ids[start : start + IN_LIST_CHUNK]),
        )
        for row in conn.execute(query).mappings():
            found[row["record_id"]] = Record(**row)
    return found


def count_created(conn: Connection, merchant_id: str, start: datetime, end: datetime) -> int:
    """How many rows were created in ``[start, end)`` (the index on merchant and creation
    time answers it without a row loaded)."""
    query = (
        select(func.count())
        .select_from(records)
        .where(
            records.c.merchant_id == merchant_id,
            records.c.created_at >= start,
            records.c.created_at < end,
        )
    )
    return int(conn.execute(query).scalar_one())


def record_ids_created(
    conn: Connection, merchant_id: str, start: datetime, end: datetime
) -> list[str]:
    """The ids of the rows created in ``[start, end)``, as ``GET /v1/records`` selects them."""
    query = select(records.c.record_id).where(
        records.c.merchant_id == merchant_id,
        records.c.created_at >= start,
        records.c.created_at < end,
    )
    return list(conn.execute(query).scalars())


def fetch_records(conn: Connection, merchant_id: str) -> dict[str, dict[str, Any]]:
    query = select(records).where(records.c.merchant_id == merchant_id)
    return {row["record_id"]: dict(row) for row in conn.execute(query).mappings()}


def _count(conn: Connection, merchant_column: Column[Any], merchant_id: str) -> int:
    query = select(func.count()).select_from(merchant_column.table)
    return int(conn.execute(query.where(merchant_column == merchant_id)).scalar_one())
