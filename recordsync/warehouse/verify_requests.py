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

from sqlalchemy import Connection, Row, insert, select, update

from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.schema import verify_requests
from recordsync.warehouse.values import BackfillState, VerifyRequest

_UNFINISHED = (BackfillState.PENDING.value, BackfillState.RUNNING.value)


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
    query = (
        select(verify_requests)
        .where(
            verify_requests.c.merchant_id.in_(merchant_ids),
            verify_requests.c.state.in_(_UNFINISHED),
        )
        .order_by(verify_requests.c.id)
    )
    return [_request(row) for row in conn.execute(query)]


def start(conn: Connection, request_id: int, holder: str) -> None:
    """Mark an unfinished request running under ``holder`` (again, after a takeover)."""
    _move(
        conn,
        request_id,
        state=BackfillState.RUNNING.value,
        holder=holder,
        started_at=database_now(),
    )


def finish(conn: Connection, request_id: int, *, result: str | None, failed: str | None) -> None:
    """Mark an unfinished request done with its ``result``, or failed with the reason."""
    _move(
        conn,
        request_id,
        state=(BackfillState.DONE if failed is None else BackfillState.FAILED).value,
        result=result,
        error=failed,
        finished_at=database_now(),
    )


def get(conn: Connection, request_id: int) -> VerifyRequest | None:
    row = conn.execute(
        select(verify_requests).where(verify_requests.c.id == request_id)
    ).one_or_none()
    return None if row is None else _request(row)


def _move(conn: Connection, request_id: int, **values: Any) -> None:
    moved = conn.execute(
        update(verify_requests)
        .where(verify_requests.c.id == request_id, verify_requests.c.state.in_(_UNFINISHED))
        .values(values)
    )
    if moved.rowcount != 1:
        raise LookupError(f"no unfinished verify request {request_id}")


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
