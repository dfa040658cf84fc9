"""Where each unknown record member was seen: first and last, by the database's clock.

Written in the page's own transaction, only for a page that carried unknown members (a page
without drift never touches the table), so ``status`` can say since when a field arrives and
whether it still does, whatever replica wrote the page.  Pages of one merchant commit side by
side on the servers, so the first sighting is an insert that does nothing where the row is
(no lock on it, nothing two pages can collide on), and the last sighting is moved at most
once a minute per writer process (``SightingRefresh``), so drifted pages do not queue behind
one another's lock on the same row.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Connection, select, update
from sqlalchemy.dialects import mysql, postgresql, sqlite

from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.schema import ID_LENGTH, promoted_fields, record_field_sightings

_T = record_field_sightings
# How often a writer moves a field's last sighting: ``status`` shows it to the minute.
REFRESH_SECONDS: Final = 60.0


@dataclass(frozen=True, slots=True)
class Sighting:
    merchant_id: str
    field: str
    first_seen_at: datetime
    last_seen_at: datetime
    first_record_id: str


class SightingRefresh:
    """Which fields' last sighting this process should move now (monotonic, not a boundary)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._moved: dict[tuple[str, str], float] = {}

    def due(self, merchant_id: str, names: Collection[str]) -> frozenset[str]:
        now = self._clock()
        with self._lock:
            due = frozenset(
                name
                for name in names
                if now - self._moved.get((merchant_id, name), -REFRESH_SECONDS) >= REFRESH_SECONDS
            )
            for name in due:
                self._moved[(merchant_id, name)] = now
        return due


def _insert_new(conn: Connection) -> Any:
    name = conn.dialect.name
    if name == "postgresql":
        return postgresql.insert(_T).on_conflict_do_nothing()
    if name == "sqlite":
        return sqlite.insert(_T).on_conflict_do_nothing()
    return mysql.insert(_T).prefix_with("IGNORE")  # a shared lock on a row already there


def record_sightings(
    conn: Connection,
    merchant_id: str,
    seen: Mapping[str, tuple[int, str]],
    refresh: Collection[str],
) -> None:
    """Each name of ``seen`` (name -> (rows, first record_id)) seen now; the last sighting
    moved for the names in ``refresh``.  Names in sorted order: pages lock alike."""
    for name in sorted(seen):
        if len(name) > ID_LENGTH:
            continue  # a name no column holds is counted and logged, not kept here
        _rows, record_id = seen[name]
        conn.execute(
            _insert_new(conn).values(
                merchant_id=merchant_id,
                field=name,
                first_seen_at=database_now(),
                last_seen_at=database_now(),
                first_record_id=record_id[:ID_LENGTH],
            )
        )
        if name in refresh:
            conn.execute(
                update(_T)
                .where(_T.c.merchant_id == merchant_id, _T.c.field == name)
                .values(last_seen_at=database_now())
            )


def read_sightings(conn: Connection, merchant_id: str | None = None) -> list[Sighting]:
    """Every sighting (of one merchant when given) of a field not promoted, by merchant then
    first sighting."""
    query = select(_T).order_by(_T.c.merchant_id, _T.c.first_seen_at, _T.c.field)
    query = query.where(_T.c.field.not_in(select(promoted_fields.c.field)))
    if merchant_id is not None:
        query = query.where(_T.c.merchant_id == merchant_id)
    return [Sighting(**row) for row in conn.execute(query).mappings()]
