"""The life of a request row handed to a merchant's holder (``backfill_requests``,
``verify_requests``): pending, running under a holder, then done or failed.

Both tables share these columns and rules; what each request carries beyond them stays in its
own module.  A move applies only to an unfinished row, so a request finished (or failed by
the command that gave up waiting) is never started again.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import Connection, Row, Table, select, update

from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.values import BackfillState

UNFINISHED = (BackfillState.PENDING.value, BackfillState.RUNNING.value)


def unfinished(conn: Connection, table: Table, merchant_ids: Collection[str]) -> list[Row[Any]]:
    """The merchants' pending and running rows, oldest first (one query for all of them)."""
    query = (
        select(table)
        .where(table.c.merchant_id.in_(merchant_ids), table.c.state.in_(UNFINISHED))
        .order_by(table.c.id)
    )
    return list(conn.execute(query))


def row(conn: Connection, table: Table, request_id: int) -> Row[Any] | None:
    return conn.execute(select(table).where(table.c.id == request_id)).one_or_none()


def start(conn: Connection, table: Table, request_id: int, holder: str, *, what: str) -> None:
    """Mark an unfinished request running under ``holder`` (again, after a takeover)."""
    _move(
        conn,
        table,
        request_id,
        what,
        state=BackfillState.RUNNING.value,
        holder=holder,
        started_at=database_now(),
    )


def finish(
    conn: Connection,
    table: Table,
    request_id: int,
    *,
    what: str,
    failed: str | None,
    **values: Any,
) -> None:
    """Mark an unfinished request done (with ``values``), or failed with the reason."""
    _move(
        conn,
        table,
        request_id,
        what,
        state=(BackfillState.DONE if failed is None else BackfillState.FAILED).value,
        error=failed,
        finished_at=database_now(),
        **values,
    )


def _move(conn: Connection, table: Table, request_id: int, what: str, **values: Any) -> None:
    moved = conn.execute(
        update(table).where(table.c.id == request_id, table.c.state.in_(UNFINISHED)).values(values)
    )
    if moved.rowcount != 1:
        raise LookupError(f"no unfinished {what} request {request_id}")
