"""What operators set on a merchant that every replica obeys (``merchant_controls``): pause.

A paused merchant is held and synced by no replica: every fleet tick reads ``paused_ids`` and
hands over what it holds of them, and no replica takes them (``fleet.member``).  The row lives
in the warehouse, the replicas' one shared truth, so a pause outlasts restarts, rebalances and
the replica that was told; ``resume`` clears it and the merchant is taken again at the next
tick.  Times are the database's.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import Connection, Engine, insert, select, update

from recordsync.warehouse.connection import WRITE_OPTION, translate_errors
from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.schema import merchant_controls
from recordsync.warehouse.values import Pause


class ControlStore:
    """The controls on the warehouse's engine, each call one short transaction."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})

    def pause(self, merchant_id: str, *, by: str, reason: str | None) -> Pause:
        """Pause the merchant (again: the first pause's time is kept, the reason replaced)."""
        with translate_errors("pause merchant"), self._writer.begin() as conn:
            return pause(conn, merchant_id, by=by, reason=reason)

    def resume(self, merchant_id: str, *, by: str) -> Pause | None:
        """Resume the merchant; the pause it ended, or None when it was not paused."""
        with translate_errors("resume merchant"), self._writer.begin() as conn:
            return resume(conn, merchant_id, by=by)

    def paused(self, merchant_ids: Collection[str]) -> dict[str, Pause]:
        """The merchants among ``merchant_ids`` that are paused, with their pause."""
        if not merchant_ids:
            return {}
        with translate_errors("read merchant controls"), self._engine.begin() as conn:
            return paused(conn, merchant_ids)


def pause(conn: Connection, merchant_id: str, *, by: str, reason: str | None) -> Pause:
    now = database_now()
    known = _pause_of(conn, merchant_id)
    since = known.since if known is not None else now
    values = {
        "paused_at": since,
        "paused_by": known.by if known is not None else by,
        "reason": reason,
        "changed_at": now,
        "changed_by": by,
    }
    moved = conn.execute(
        update(merchant_controls)
        .where(merchant_controls.c.merchant_id == merchant_id)
        .values(values)
    )
    if moved.rowcount == 0:
        conn.execute(insert(merchant_controls).values(merchant_id=merchant_id, **values))
    paused_now = _pause_of(conn, merchant_id)
    assert paused_now is not None
    return paused_now


def resume(conn: Connection, merchant_id: str, *, by: str) -> Pause | None:
    known = _pause_of(conn, merchant_id)
    if known is None:
        return None
    conn.execute(
        update(merchant_controls)
        .where(merchant_controls.c.merchant_id == merchant_id)
        .values(
            paused_at=None,
            paused_by=None,
            reason=None,
            changed_at=database_now(),
            changed_by=by,
        )
    )
    return known


def paused(conn: Connection, merchant_ids: Collection[str]) -> dict[str, Pause]:
    rows = conn.execute(
        select(merchant_controls).where(
            merchant_controls.c.merchant_id.in_(merchant_ids),
            merchant_controls.c.paused_at.is_not(None),
        )
    )
    return {row.merchant_id: Pause(row.paused_at, row.paused_by, row.reason) for row in rows}


def _pause_of(conn: Connection, merchant_id: str) -> Pause | None:
    return paused(conn, [merchant_id]).get(merchant_id)
