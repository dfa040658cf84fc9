"""Verify runs handed to the merchant's holder, so the merchant's rate budget is spent once.

While a daemon holds a merchant, ``recordsync verify`` does not read the platform itself: it
inserts a request row (``request``), the holder runs it inside its own budget at the lowest
priority (``start``, the comparison, repairs fenced by its epoch, then ``finish`` with the
findings as a JSON document in ``result``), and the command follows the row and prints the
findings.  A request a holder started and did not finish (it died, or handed the merchant
over) stays ``running`` and is listed again (``unfinished``): the next holder runs it again
from the start (a verify keeps no progress; its repairs are idempotent).  Times are the
database's.  States are ``BackfillState``'s: the same life.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, insert

from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.requests import rows as request_rows
from recordsync.warehouse.schema import verify_requests
from recordsync.warehouse.values import BackfillState, VerifyRequest


def request(
    conn: Connection, merchant_id: str, start: datetime, end: datetime, *, repair: bool
) -> int:
    """The id of a new pending request (each run of the command is its own: a verify answers
    "now", so an old request's findings are never handed to a new run)."""
    if not start < end:
        raise ValueError(f"empty verify range [{start}, {end})")
    inserted = conn.execute(
        insert(verify_requests).values(
            merchant_id=merchant_id,
            created_from=start,
            created_to=end,
            repair=repair,
            state=BackfillState.PENDING.value,
            requested_at=database_now(),
        )
    )
    key = inserted.inserted_primary_key
    assert key is not None
    return int(key[0])


def unfinished(conn: Connection, merchant_ids: Collection[str]) -> list[VerifyRequest]:
    """The merchants' pending and running requests, oldest first."""
    return [_request(row) for row in request_rows.unfinished(conn, verify_requests, merchant_ids)]


def start(conn: Connection, request_id: int, holder: str) -> None:
    """Mark an unfinished request running under ``holder`` (again, after a takeover)."""
    request_rows.start(conn, verify_requests, request_id, holder, what="verify")


def finish(conn: Connection, request_id: int, *, result: str | None, failed: str | None) -> None:
    """Mark an unfinished request done with its ``result``, or failed with the reason."""
    request_rows.finish(
        conn, verify_requests, request_id, what="verify", failed=failed, result=result
    )


def get(conn: Connection, request_id: int) -> VerifyRequest | None:
    row = request_rows.row(conn, verify_requests, request_id)
    return None if row is None else _request(row)


def _request(row: Row[Any]) -> VerifyRequest:
    return VerifyRequest(
        id=int(row.id),
        merchant_id=row.merchant_id,
        created_from=row.created_from,
        created_to=row.created_to,
        repair=bool(row.repair),
        state=BackfillState(row.state),
        requested_at=row.requested_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        holder=row.holder,
        error=row.error,
        result=row.result,
    )
