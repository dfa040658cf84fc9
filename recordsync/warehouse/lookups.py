"""Point reads the sync needs beside its writes (the drift check compares revisions)."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select

from recordsync.warehouse import schema
from recordsync.warehouse.store import Warehouse

_CHUNK = 500  # keep IN lists well under every backend's parameter limit


def stored_revisions(
    warehouse: Warehouse, merchant_id: str, record_ids: Collection[str]
) -> dict[str, int]:
    """record_id -> revision held in ``records`` for the ids that exist."""
    ids = list(record_ids)
    found: dict[str, int] = {}
    table = schema.records
    with warehouse.engine.connect() as connection:
        for start in range(0, len(ids), _CHUNK):
            query = select(table.c.record_id, table.c.revision).where(
                table.c.merchant_id == merchant_id,
                table.c.record_id.in_(ids[start : start + _CHUNK]),
            )
            found.update({row.record_id: row.revision for row in connection.execute(query)})
    return found
