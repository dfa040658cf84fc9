"""Which warehouse this is: the id drawn once when it was migrated to revision 0014
(``warehouse_identity``).  A state export names it, so that an import can tell a file of this
warehouse from one of another (``sync.state_import``)."""

from __future__ import annotations

from sqlalchemy import Connection, select

from recordsync.warehouse.schema import warehouse_identity


def warehouse_id(conn: Connection) -> str | None:
    """This warehouse's id; None only where the row was deleted by hand."""
    found = conn.execute(
        select(warehouse_identity.c.warehouse_id).order_by(warehouse_identity.c.created_at).limit(1)
    ).scalar_one_or_none()
    return None if found is None else str(found)
