"""Which optional endpoints the platform serves each merchant (``endpoint_availability``).

The holder writes what it saw at every change and every recheck (``record``); ``since`` moves
only when the endpoint becomes available or unavailable, or is refused with another status,
so that ``recordsync status`` can say "unavailable since ..." however often it was checked.
The times come from the warehouse's clock: bookkeeping, not a sync boundary.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, insert, select, update

from recordsync.core.state import EndpointAvailability
from recordsync.warehouse.schema import endpoint_availability
from recordsync.warehouse.values import Availability


def record(
    conn: Connection, merchant_id: str, seen: EndpointAvailability, *, now: datetime
) -> None:
    """Store ``seen`` inside the caller's transaction."""
    table = endpoint_availability
    key = (table.c.merchant_id == merchant_id) & (table.c.endpoint == seen.endpoint)
    stored = conn.execute(
        select(table.c.available, table.c.status, table.c.code).where(key)
    ).one_or_none()
    values = {
        "available": seen.available,
        "status": seen.status,
        "code": seen.code,
        "checked_at": now,
        "next_check_at": None
        if seen.recheck_in is None
        else now + timedelta(seconds=seen.recheck_in),
    }
    if stored is None:
        conn.execute(
            insert(table).values(
                merchant_id=merchant_id, endpoint=seen.endpoint, since=now, **values
            )
        )
        return
    changed = tuple(stored) != (seen.available, seen.status, seen.code)
    conn.execute(update(table).where(key).values(**values, **({"since": now} if changed else {})))


def read(conn: Connection, merchant_id: str) -> list[Availability]:
    """Every optional endpoint recorded for the merchant, by name."""
    table = endpoint_availability
    rows = conn.execute(
        select(table).where(table.c.merchant_id == merchant_id).order_by(table.c.endpoint)
    ).mappings()
    return [
        Availability(
            endpoint=row["endpoint"],
            available=bool(row["available"]),
            status=row["status"],
            code=row["code"],
            since=row["since"],
            checked_at=row["checked_at"],
            next_check_at=row["next_check_at"],
        )
        for row in rows
    ]
