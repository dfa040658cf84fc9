"""Backfills handed to the merchant's holder, so the merchant's rate budget is spent once.

While a daemon holds a merchant, ``recordsync backfill`` does not read the platform itself: it
inserts a request row (``request``), the holder runs it inside its own budget (``start``, the
job's windows through the usual fenced commits, then ``finish``), and the command follows the
row until it is finished.  A request a holder started and did not finish (it died, or handed
the merchant over) stays ``running`` and is listed again (``unfinished``): the next holder
resumes it from the job's windows, which keep its progress.  Times are the database's.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, insert, select

from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.requests import rows as request_rows
from recordsync.warehouse.schema import backfill_requests
from recordsync.warehouse.values import BackfillRequest, BackfillState


def request(conn: Connection, merchant_id: str, start: datetime, end: datetime, job: str) -> int:
    """The id of the merchant's unfinished request for ``job``, or of a new pending one.

    Asking again for a job already asked for (the command was interrupted and run again)
    follows the first request instead of queueing the same work twice.
    """
    if not start < end:
        raise ValueError(f"empty backfill range [{start}, {end})")
    known = conn.execute(
        select(backfill_requests.c.id)
        .where(
            backfill_requests.c.merchant_id == merchant_id,
            backfill_requests.c.state.in_(request_rows.UNFINISHED),
            backfill_requests.c.job == job,
        )
        .order_by(backfill_requests.c.id)
        .limit(1)
    ).scalar_one_or_none()
    if known is not None:
        return int(known)
    inserted = conn.execute(
        insert(backfill_requests).values(
            merchant_id=merchant_id,
            created_from=start,
            created_to=end,
            job=job,
            state=BackfillState.PENDING.value,
            requested_at=database_now(),
        )
    )
    key = inserted.inserted_primary_key
    assert key is not None
    return int(key[0])


def unfinished(conn: Connection, merchant_ids: Collection[str]) -> list[BackfillRequest]:
    """The merchants' pending and running requests, oldest first."""
    return [_request(row) for row in request_rows.unfinished(conn, backfill_requests, merchant_ids)]


def start(conn: Connection, request_id: int, holder: str) -> None:
    """Mark an unfinished request running under ``holder`` (again, after a takeover)."""
    request_rows.start(conn, backfill_requests, request_id, holder, what="backfill")


def finish(conn: Connection, request_id: int, *, failed: str | None) -> None:
    """Mark an unfinished request done, or failed with the reason ``failed``."""
    request_rows.finish(conn, backfill_requests, request_id, what="backfill", failed=failed)


def get(conn: Connection, request_id: int) -> BackfillRequest | None:
    row = request_rows.row(conn, backfill_requests, request_id)
    return None if row is None else _request(row)


def _request(row: Row[Any]) -> BackfillRequest:
    return BackfillRequest(
        id=int(row.id),
        merchant_id=row.merchant_id,
        created_from=row.created_from,
        created_to=row.created_to,
        job=row.job,
        state=BackfillState(row.state),
        requested_at=row.requested_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        holder=row.holder,
        error=row.error,
    )
