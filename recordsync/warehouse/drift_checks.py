"""When each merchant's drift check last ran, and since when it waits (``drift_checks``).

A drift check is background work: behind a snapshot it is deferred, window after window,
rather than holding a shared thread (``platform.budget``).  Its holder notes here the end of
every run and the start of each deferral, so that ``status`` can say why a check is overdue.
Only the merchant's holder writes its row (the lease), so an update, then an insert when
there was none, cannot race.  Times are the database's.
"""

from __future__ import annotations

from sqlalchemy import Connection, func, insert, select, update

from recordsync.warehouse.database_clock import database_now, read_database_now
from recordsync.warehouse.schema import drift_checks
from recordsync.warehouse.values import DriftCheckRun


def note(conn: Connection, merchant_id: str, *, deferred: bool) -> None:
    """A run ended (``deferred`` False) or a deferral began (True: kept from the first one
    until the next run)."""
    now = database_now()
    values = (
        {"deferred_since": func.coalesce(drift_checks.c.deferred_since, now)}
        if deferred
        else {"last_run_at": now, "deferred_since": None}
    )
    moved = conn.execute(
        update(drift_checks).where(drift_checks.c.merchant_id == merchant_id).values(values)
    )
    if moved.rowcount == 0:
        conn.execute(
            insert(drift_checks).values(
                merchant_id=merchant_id,
                last_run_at=None if deferred else now,
                deferred_since=now if deferred else None,
            )
        )


def last_run(conn: Connection, merchant_id: str) -> DriftCheckRun | None:
    row = conn.execute(
        select(drift_checks.c.last_run_at, drift_checks.c.deferred_since).where(
            drift_checks.c.merchant_id == merchant_id
        )
    ).one_or_none()
    if row is None:
        return None
    return DriftCheckRun(row.last_run_at, row.deferred_since, read_database_now(conn))
