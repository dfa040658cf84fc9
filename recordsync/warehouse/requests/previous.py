"""What a previous version's command asks in the request tables before ``sync_requests``.

During a rolling upgrade a ``recordsync backfill`` or ``verify`` of the previous version may
still insert into ``backfill_requests`` or ``verify_requests`` while a daemon of this version
holds the merchant.  No holder of this version runs those rows, and the command would follow
its request until interrupted.  So the holder fails them, with a reason the command prints as
its last line.  A look first, a write only when there is something to fail: on SQLite an
UPDATE takes the database's write lock even when it matches nothing.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from sqlalchemy import Connection, Table, select, update

from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.requests.book import UNFINISHED
from recordsync.warehouse.schema import backfill_requests, verify_requests
from recordsync.warehouse.values import RequestState

REASON: Final = (
    "a newer recordsync holds the merchant and no longer reads this request: run the command "
    "again with the daemon's version"
)


def fail_previous(conn: Connection, merchant_ids: Collection[str]) -> int:
    """Fail the merchants' unfinished rows in the previous tables; how many were failed."""
    failed = 0
    for table in (backfill_requests, verify_requests):
        ids = _unfinished_ids(conn, table, merchant_ids)
        if not ids:
            continue
        moved = conn.execute(
            update(table)
            .where(table.c.id.in_(ids), table.c.state.in_(UNFINISHED))
            .values(state=RequestState.FAILED.value, error=REASON, finished_at=database_now())
        )
        failed += moved.rowcount
    return failed


def _unfinished_ids(conn: Connection, table: Table, merchant_ids: Collection[str]) -> list[int]:
    query = select(table.c.id).where(
        table.c.merchant_id.in_(merchant_ids), table.c.state.in_(UNFINISHED)
    )
    return [int(row_id) for row_id in conn.execute(query).scalars()]
