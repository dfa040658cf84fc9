"""Promoting a kept field to a column without reading the history again.

Steps, each its own short transaction, so the sync goes on meanwhile and a promotion stopped
at any instant resumes where it was when run again:

1. the typed, nullable column is added to ``records`` and ``record_revisions`` (no rewrite of
   the table on any backend: a nullable column without a default) and the field registered
   in ``promoted_fields`` as ``filling``;
2. a wait longer than the writers' view of ``promoted_fields`` is old (``PromotedCache``):
   from then on every page fills the column of the rows it writes (``promoted.fill_page``);
3. the rows written before are filled from ``extra_fields`` in batches in key order, each
   batch one transaction that also moves the fill's position (``fill_*`` columns), only rows
   still at the revision read (a row the sync moved on meanwhile was filled by its writer);
4. ``done``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    and_,
    bindparam,
    func,
    insert,
    inspect,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.schema import CreateColumn

from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.fields.promoted import (
    COLUMN_TYPES,
    DONE,
    FILLING,
    Promoted,
    row_values,
    target_table,
)
from recordsync.warehouse.schema import promoted_fields, record_field_sightings

TABLES: Final = ("records", "record_revisions")
BATCH: Final = 1000
_P = promoted_fields


@dataclass(frozen=True, slots=True)
class PromotionPlan:
    """What a promotion would do: how many rows carry the field now, in each table."""

    field: str
    type: str
    carrying: dict[str, int]
    state: str | None  # None: not promoted yet


@dataclass(frozen=True, slots=True)
class PromotionResult:
    field: str
    type: str
    filled: int
    unfit: int


class PromotionRefused(Exception):  # noqa: N818 - the operator's request cannot be done
    """The field is promoted already with another type."""


def _carrying(conn: Connection, table: str, field: str) -> int:
    """Rows whose ``extra_fields`` has the member (counted by the server, by its JSON)."""
    dialect = conn.dialect.name
    if dialect == "postgresql":
        where = "extra_fields ? :f"
    elif dialect == "sqlite":
        where = "json_type(extra_fields, '$.\"' || :f || '\"') IS NOT NULL"
    else:
        where = "JSON_CONTAINS_PATH(extra_fields, 'one', CONCAT('$.\"', :f, '\"'))"
    sql = f"SELECT COUNT(*) FROM {table} WHERE extra_fields IS NOT NULL AND {where}"  # noqa: S608
    return int(conn.execute(text(sql), {"f": field}).scalar_one())


def plan(engine: Engine, field: str, kind: str) -> PromotionPlan:
    with engine.connect() as conn:
        state = conn.execute(select(_P.c.state).where(_P.c.field == field)).scalar_one_or_none()
        return PromotionPlan(field, kind, {t: _carrying(conn, t, field) for t in TABLES}, state)


def _add_columns(engine: Engine, field: str, kind: str) -> None:
    for table in TABLES:
        present = {c["name"] for c in inspect(engine).get_columns(table)}
        if field in present:
            continue  # a promotion stopped after this step, run again
        column = CreateColumn(Column(field, COLUMN_TYPES[kind](), nullable=True))
        with engine.begin() as conn:
            spelled = column.compile(dialect=conn.dialect)
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {spelled}"))


def _register(engine: Engine, field: str, kind: str) -> bool:
    """The field as ``filling``; False when it is promoted already (with this type)."""
    with engine.begin() as conn:
        held = conn.execute(select(_P.c.type).where(_P.c.field == field)).scalar_one_or_none()
        if held is not None:
            if held != kind:
                raise PromotionRefused(f"{field} is promoted already, as {held}")
            return False
        conn.execute(
            insert(_P).values(
                field=field,
                column_name=field,
                type=kind,
                state=FILLING,
                requested_at=database_now(),
                rows_filled=0,
                rows_unfit=0,
            )
        )
        return True


def promote(
    engine: Engine,
    field: str,
    kind: str,
    *,
    settle: float,
    sleep: Callable[[float], None] = time.sleep,
    batch: int = BATCH,
    on_batch: Callable[[int, int], None] | None = None,
) -> PromotionResult:
    """Promote ``field`` as ``kind`` (steps 1-4 above); ``settle``: step 2's wait, seconds."""
    if _register(engine, field, kind):
        _add_columns(engine, field, kind)
        sleep(settle)
    else:
        _add_columns(engine, field, kind)  # stopped between registering and adding
    promoted = Promoted(field, kind)
    for table in TABLES:
        while _fill_batch(engine, table, promoted, batch, on_batch):
            pass
    with engine.begin() as conn:
        conn.execute(
            update(_P)
            .where(_P.c.field == field)
            .values(state=DONE, finished_at=database_now(), fill_table=None)
        )
        filled, unfit = conn.execute(
            select(_P.c.rows_filled, _P.c.rows_unfit).where(_P.c.field == field)
        ).one()
    return PromotionResult(field, kind, int(filled), int(unfit))


def _fill_batch(
    engine: Engine,
    table_name: str,
    promoted: Promoted,
    batch: int,
    on_batch: Callable[[int, int], None] | None,
) -> bool:
    """One batch of ``table_name`` after the fill's position; False when none was left."""
    table = target_table(table_name, [promoted])
    with engine.begin() as conn:
        state = conn.execute(
            select(
                _P.c.state,
                _P.c.fill_table,
                _P.c.fill_merchant_id,
                _P.c.fill_record_id,
                _P.c.fill_revision,
            ).where(_P.c.field == promoted.field)
        ).one()
        if state.state == DONE:
            return False
        if state.fill_table is not None and TABLES.index(state.fill_table) > TABLES.index(
            table_name
        ):
            return False  # this table was filled by an earlier run
        query = select(
            table.c.merchant_id, table.c.record_id, table.c.revision, table.c.extra_fields
        )
        query = query.where(table.c.extra_fields.is_not(None))
        if state.fill_table == table_name and state.fill_merchant_id is not None:
            query = query.where(_after(table, state))
        query = query.order_by(table.c.merchant_id, table.c.record_id, table.c.revision)
        rows = conn.execute(query.limit(batch)).all()
        if not rows:
            return False
        updates, unfit, filled = [], 0, 0
        for merchant_id, record_id, revision, extra in rows:
            (value,), bad = row_values([promoted], extra)
            unfit += bad
            filled += value is not None
            updates.append({"m": merchant_id, "r": record_id, "v": revision, "x": value})
        conn.execute(
            update(table)
            .where(
                table.c.merchant_id == bindparam("m"),
                table.c.record_id == bindparam("r"),
                table.c.revision == bindparam("v"),
            )
            .values({promoted.field: bindparam("x")}),
            updates,
        )
        last = rows[-1]
        conn.execute(
            update(_P)
            .where(_P.c.field == promoted.field)
            .values(
                fill_table=table_name,
                fill_merchant_id=last.merchant_id,
                fill_record_id=last.record_id,
                fill_revision=last.revision,
                rows_filled=_P.c.rows_filled + filled,
                rows_unfit=_P.c.rows_unfit + unfit,
            )
        )
    if on_batch is not None:
        on_batch(len(rows), unfit)
    return True


def _after(table: Any, state: Any) -> Any:
    """Rows after the fill's position in (merchant_id, record_id, revision) order."""
    m, r, v = table.c.merchant_id, table.c.record_id, table.c.revision
    return or_(
        m > state.fill_merchant_id,
        and_(m == state.fill_merchant_id, r > state.fill_record_id),
        and_(m == state.fill_merchant_id, r == state.fill_record_id, v > state.fill_revision),
    )


@dataclass(frozen=True, slots=True)
class FieldsView:
    """``fields list``: the fields recordsync knows, the promoted ones, the unknown ones."""

    promoted: list[dict[str, Any]]
    unknown: list[dict[str, Any]]


def list_fields(engine: Engine) -> FieldsView:
    s = record_field_sightings
    with engine.connect() as conn:
        promoted = [dict(row) for row in conn.execute(select(_P).order_by(_P.c.field)).mappings()]
        names = {row["field"] for row in promoted}
        unknown = [
            {
                "field": row.field,
                "merchants": int(row.merchants),
                "first_seen_at": row.first_seen_at,
                "last_seen_at": row.last_seen_at,
            }
            for row in conn.execute(
                select(
                    s.c.field,
                    func.count().label("merchants"),
                    func.min(s.c.first_seen_at).label("first_seen_at"),
                    func.max(s.c.last_seen_at).label("last_seen_at"),
                )
                .group_by(s.c.field)
                .order_by(s.c.field)
            )
            if row.field not in names
        ]
    return FieldsView(promoted, unknown)
