"""Reads only the tests need: every stored game and every stored revision of a merchant, as
plain dicts (the product's ``Warehouse`` keeps none of them).  The demo's and the
end-to-end checks' ``RecordStore.fetch_records`` stays in the product: the demo compares with it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from recordsync.warehouse import Warehouse
from recordsync.warehouse.schema import game_localizations, games, record_revisions


def fetch_revisions(
    warehouse: Warehouse, merchant_id: str, record_id: str | None = None
) -> list[dict[str, Any]]:
    """The stored revision history, ordered by (record_id, revision)."""
    query = select(record_revisions).where(record_revisions.c.merchant_id == merchant_id)
    if record_id is not None:
        query = query.where(record_revisions.c.record_id == record_id)
    query = query.order_by(record_revisions.c.record_id, record_revisions.c.revision)
    with warehouse.engine.begin() as conn:
        return [dict(row) for row in conn.execute(query).mappings()]


def fetch_games(warehouse: Warehouse, merchant_id: str) -> dict[str, dict[str, Any]]:
    """Every stored game row with its ``localizations`` (language -> name)."""
    with warehouse.engine.begin() as conn:
        found = {
            row["game_id"]: {**row, "localizations": {}}
            for row in conn.execute(
                select(games).where(games.c.merchant_id == merchant_id)
            ).mappings()
        }
        for row in conn.execute(
            select(game_localizations).where(game_localizations.c.merchant_id == merchant_id)
        ).mappings():
            found[row["game_id"]]["localizations"][row["language"]] = row["name"]
    return found
