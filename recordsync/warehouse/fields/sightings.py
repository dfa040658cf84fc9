"""Where each unknown record member was seen: first and last, by the database's clock.

Written in the page's own transaction, only for a page that carried unknown members (a page
without drift never touches the table), so ``status`` can say since when a field arrives and
whether it still does, whatever replica wrote the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, insert, select, update

from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.schema import ID_LENGTH, promoted_fields, record_field_sightings

_T = record_field_sightings


@dataclass(frozen=True, slots=True)
class Sighting:
    merchant_id: str
    field: str
    first_seen_at: datetime
    last_seen_at: datetime
    first_record_id: str


def record_sightings(
    conn: Connection, merchant_id: str, seen: Mapping[str, tuple[int, str]]
) -> None:
    """Each name of ``seen`` (name -> (rows, first record_id)) seen now."""
    for name, (_rows, record_id) in seen.items():
        if len(name) > ID_LENGTH:
            continue  # a name no column holds is counted and logged, not kept here
        moved = conn.execute(
            update(_T)
            .where(_T.c.merchant_id == merchant_id, _T.c.field == name)
            .values(last_seen_at=database_now())
        )
        if moved.rowcount == 0:
            conn.execute(
                insert(_T).values(
                    merchant_id=merchant_id,
                    field=name,
                    first_seen_at=database_now(),
                    last_seen_at=database_now(),
                    first_record_id=record_id[:ID_LENGTH],
                )
            )


def read_sightings(conn: Connection, merchant_id: str | None = None) -> list[Sighting]:
    """Every sighting (of one merchant when given) of a field not promoted, by merchant then
    first sighting."""
    query = select(_T).order_by(_T.c.merchant_id, _T.c.first_seen_at, _T.c.field)
    query = query.where(_T.c.field.not_in(select(promoted_fields.c.field)))
    if merchant_id is not None:
        query = query.where(_T.c.merchant_id == merchant_id)
    return [Sighting(**row) for row in conn.execute(query).mappings()]
