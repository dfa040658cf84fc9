"""The requests commands hand to a merchant's holder (``sync_requests``), of every kind.

While a daemon holds a merchant, ``recordsync backfill`` and ``recordsync verify`` do not read
the platform themselves: they insert a request (``ask``), the holder runs it inside its own
budget (``start``, the work fenced by its epoch, then ``finish``), and the command follows
the row until it is finished (``get``).  A request a holder started and did not finish (it
died, or handed the merchant over) stays ``running`` and is listed again (``unfinished``):
the next holder takes it up, a backfill from its job's windows, a verify from the start.

A move applies only to an unfinished row (``LookupError`` otherwise), so a request finished,
or failed by the command that took it back, is never started again.  Times are the
database's.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, insert, select, update

from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.schema import sync_requests
from recordsync.warehouse.values import HolderRequest, RequestKind, RequestState

UNFINISHED = (RequestState.PENDING.value, RequestState.RUNNING.value)


def ask(
    conn: Connection,
    merchant_id: str,
    kind: RequestKind,
    start: datetime,
    end: datetime,
    *,
    key: str | None = None,
    repair: bool = False,
) -> int:
    """The id of a new pending request; with ``key``, of the merchant's unfinished request of
    that kind and key when there is one (a command interrupted and run again follows the
    first request instead of queueing the same work twice)."""
    if not start < end:
        raise ValueError(f"empty {kind.value} range [{start}, {end})")
    if key is not None:
        known = conn.execute(
            select(sync_requests.c.id)
            .where(
                sync_requests.c.merchant_id == merchant_id,
                sync_requests.c.state.in_(UNFINISHED),
                sync_requests.c.kind == kind.value,
                sync_requests.c.key == key,
            )
            .order_by(sync_requests.c.id)
            .limit(1)
        ).scalar_one_or_none()
        if known is not None:
            return int(known)
    inserted = conn.execute(
        insert(sync_requests).values(
            merchant_id=merchant_id,
            kind=kind.value,
            created_from=start,
            created_to=end,
            key=key,
            repair=repair,
            state=RequestState.PENDING.value,
            requested_at=database_now(),
        )
    )
    primary_key = inserted.inserted_primary_key
    assert primary_key is not None
    return int(primary_key[0])


def unfinished(conn: Connection, merchant_ids: Collection[str]) -> list[HolderRequest]:
    """The merchants' pending and running requests of every kind, oldest first (one query for
    all of them)."""
    query = (
        select(sync_requests)
        .where(
            sync_requests.c.merchant_id.in_(merchant_ids),
            sync_requests.c.state.in_(UNFINISHED),
            # A newer version's kind (during a rolling upgrade) is left to its own holders.
            sync_requests.c.kind.in_([kind.value for kind in RequestKind]),
        )
        .order_by(sync_requests.c.id)
    )
    return [_request(row) for row in conn.execute(query)]


def get(conn: Connection, request_id: int) -> HolderRequest | None:
    row = conn.execute(select(sync_requests).where(sync_requests.c.id == request_id))
    found = row.one_or_none()
    return None if found is None else _request(found)


def start(conn: Connection, request_id: int, holder: str) -> None:
    """Mark an unfinished request running under ``holder`` (again, after a takeover)."""
    _move(
        conn,
        request_id,
        state=RequestState.RUNNING.value,
        holder=holder,
        started_at=database_now(),
    )


def finish(
    conn: Connection, request_id: int, *, failed: str | None = None, result: str | None = None
) -> None:
    """Mark an unfinished request done (with its ``result``), or failed with the reason (shown
    to the requester, so never a secret)."""
    _move(
        conn,
        request_id,
        state=(RequestState.DONE if failed is None else RequestState.FAILED).value,
        error=failed,
        result=result,
        finished_at=database_now(),
    )


def _move(conn: Connection, request_id: int, **values: Any) -> None:
    moved = conn.execute(
        update(sync_requests)
        .where(sync_requests.c.id == request_id, sync_requests.c.state.in_(UNFINISHED))
        .values(values)
    )
    if moved.rowcount != 1:
        raise LookupError(f"no unfinished request {request_id}")


def _request(row: Row[Any]) -> HolderRequest:
    return HolderRequest(
        id=int(row.id),
        merchant_id=row.merchant_id,
        kind=RequestKind(row.kind),
        created_from=row.created_from,
        created_to=row.created_to,
        key=row.key,
        repair=bool(row.repair),
        state=RequestState(row.state),
        requested_at=row.requested_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        holder=row.holder,
        error=row.error,
        result=row.result,
    )
