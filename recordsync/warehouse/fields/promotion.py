"""Promoting a kept field to a column without reading the history again.

Steps, each its own short transaction, so the sync goes on meanwhile and a promotion stopped
at any instant resumes where it was when run again:

1. the field is registered in ``promoted_fields`` as ``adding`` (which no writer fills), the
   typed, nullable column added to ``records`` and ``record_revisions`` (no rewrite of the
   table on any backend: a nullable column without a default; each ALTER waits a bounded
   time for the table, so the page commits never queue behind it for long), then the field
   marked ``filling``;
2. a wait longer than the writers' view of ``promoted_fields`` is old (``PromotedCache``),
   on every run, a resumed one too: from then on every page fills the column of the rows it
   writes (``promoted.fill_page``);
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
    Table,
    and_,
    bindparam,
    func,
    insert,
    inspect,
    select,
    text,
    true,
    update,
)
from sqlalchemy.exc import OperationalError
from sqlalchemy.schema import CreateColumn
from sqlalchemy.sql.elements import ColumnElement

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.fields.promoted import (
    ADDING,
    COLUMN_TYPES,
    DONE,
    FILLING,
    Promoted,
    row_values,
    target_table,
)
from recordsync.warehouse.schema import (
    CLUSTERED_BY_ROW_ID,
    promoted_fields,
    record_field_sightings,
)

TABLES: Final = ("records", "record_revisions")
BATCH: Final = 1000
ALTER_LOCK_WAIT: Final = 1.0
COUNT_PIECE: Final = 100_000
ALTER_ATTEMPTS: Final = 60
_POSTGRES_LOCK_NOT_AVAILABLE: Final = "55P03"
_MARIADB_LOCK_WAIT_TIMEOUT: Final = 1205
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


def _carries(dialect: str) -> str:
    """SQL true where a row's ``extra_fields`` has the member ``:f`` (by its JSON)."""
    if dialect == "postgresql":
        return "extra_fields ? :f"
    if dialect == "sqlite":
        return "json_type(extra_fields, '$.\"' || :f || '\"') IS NOT NULL"
    return "JSON_CONTAINS_PATH(extra_fields, 'one', CONCAT('$.\"', :f, '\"'))"


def _carrying(conn: Connection, table: str, field: str, piece: int) -> int:
    """Rows whose ``extra_fields`` has the member, counted by the server in pieces of at most
    ``piece`` records, each its own short read: one count of a year's table ran past a
    read's statement limit (MariaDB: 1 s every 500,000 rows), and held its snapshot as long."""
    carries = _carries(conn.dialect.name)
    hint = f" {_key_hint(table)}" if conn.dialect.name in MYSQL_FAMILY else ""
    total, merchant = 0, None
    while True:
        after_merchant = "" if merchant is None else " WHERE merchant_id > :m"
        merchant = conn.execute(
            text(f"SELECT MIN(merchant_id) FROM {table}{after_merchant}"),  # noqa: S608
            {"m": merchant},
        ).scalar_one_or_none()
        if merchant is None:
            return total
        after: str | None = None
        while True:
            _keyed_reads_only(conn)
            where = "merchant_id = :m" + ("" if after is None else " AND record_id > :after")
            values = {"m": merchant, "after": after, "f": field}
            end = conn.execute(
                text(
                    f"SELECT record_id FROM {table}{hint} WHERE {where} "  # noqa: S608
                    f"ORDER BY record_id LIMIT 1 OFFSET {int(piece) - 1}"
                ),
                values,
            ).scalar_one_or_none()
            upper = "" if end is None else " AND record_id <= :end"
            total += int(
                conn.execute(
                    text(
                        f"SELECT COUNT(*) FROM {table}{hint} WHERE {where}{upper} "  # noqa: S608
                        f"AND extra_fields IS NOT NULL AND {carries}"
                    ),
                    {**values, "end": end},
                ).scalar_one()
            )
            conn.commit()
            if end is None:
                break
            after = end


def plan(engine: Engine, field: str, kind: str, *, piece: int = COUNT_PIECE) -> PromotionPlan:
    with engine.connect() as conn:
        state = conn.execute(select(_P.c.state).where(_P.c.field == field)).scalar_one_or_none()
        conn.commit()
        return PromotionPlan(
            field, kind, {t: _carrying(conn, t, field, piece) for t in TABLES}, state
        )


def _add_columns(
    engine: Engine, field: str, kind: str, sleep: Callable[[float], None] = time.sleep
) -> None:
    for table in TABLES:
        present = {c["name"] for c in inspect(engine).get_columns(table)}
        if field in present:
            continue  # a promotion stopped after this step, run again
        column = CreateColumn(Column(field, COLUMN_TYPES[kind](), nullable=True))
        for attempt in range(1, ALTER_ATTEMPTS + 1):
            try:
                with engine.begin() as conn:
                    _bound_lock_wait(conn)
                    spelled = column.compile(dialect=conn.dialect)
                    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {spelled}"))
                break
            except OperationalError as exc:
                if attempt == ALTER_ATTEMPTS or not _lock_wait_ended(exc):
                    raise
                sleep(ALTER_LOCK_WAIT)


def _lock_wait_ended(exc: OperationalError) -> bool:
    """The ALTER gave up its wait for the lock (PostgreSQL 55P03, MariaDB 1205), not the
    warehouse gone."""
    if getattr(exc.orig, "sqlstate", None) == _POSTGRES_LOCK_NOT_AVAILABLE:
        return True
    args: tuple[object, ...] = getattr(exc.orig, "args", ())
    return bool(args) and args[0] == _MARIADB_LOCK_WAIT_TIMEOUT


def _bound_lock_wait(conn: Connection) -> None:
    """An ALTER waits for the table's lock behind every open reader (a long BI query, a
    verify), and every page commit queued behind the ALTER waits with it: so it waits at most
    ``ALTER_LOCK_WAIT`` and is tried again, and the pages in between go through."""
    seconds = int(ALTER_LOCK_WAIT)
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"SET LOCAL lock_timeout = '{seconds}s'"))
    elif conn.dialect.name != "sqlite":
        conn.execute(text(f"SET SESSION lock_wait_timeout = {seconds}"))


def _register(engine: Engine, field: str, kind: str) -> str:
    """The field's state, registered as ``adding`` if it was not; refused when it is
    promoted already with another type."""
    with engine.begin() as conn:
        held = conn.execute(select(_P.c.type, _P.c.state).where(_P.c.field == field)).one_or_none()
        if held is not None:
            if held.type != kind:
                raise PromotionRefused(f"{field} is promoted already, as {held.type}")
            return str(held.state)
        conn.execute(
            insert(_P).values(
                field=field,
                column_name=field,
                type=kind,
                state=ADDING,
                requested_at=database_now(),
                rows_filled=0,
                rows_unfit=0,
            )
        )
        return ADDING


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
    state = _register(engine, field, kind)
    if state == ADDING:
        _add_columns(engine, field, kind, sleep)
        with engine.begin() as conn:
            conn.execute(
                update(_P).where(_P.c.field == field, _P.c.state == ADDING).values(state=FILLING)
            )
    if state != DONE:
        sleep(settle)
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
    """The next ``batch`` rows of ``table_name`` after the fill's position, their members
    written to the column; False when none was left.

    A batch reads ``batch`` rows whether they carry the member or not, so its cost is bounded
    however rare the field is, and the rows it writes stay locked only for its own short
    transaction, taken in key order as every page takes them."""
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
        position = state if state.fill_table == table_name else None
        rows = _rows_after(conn, table, position, batch)
        if not rows:
            return False
        updates, unfit, filled = [], 0, 0
        for merchant_id, record_id, revision, extra in rows:
            if extra is None:
                continue
            (value,), bad = row_values([promoted], extra)
            unfit += bad
            if value is None:
                continue  # the column is NULL already: nothing to write
            filled += 1
            updates.append({"m": merchant_id, "r": record_id, "v": revision, "x": value})
        if updates:
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


def _rows_after(conn: Connection, table: Table, position: Any, batch: int) -> list[Any]:
    """The first ``batch`` rows after ``position`` (None: from the start) in key order.

    The position is a three-part key, and "after it" written as one condition (``m > M OR (m
    = M AND r > R) OR ...``) is a filter no index range serves: every backend read the whole
    rest of the merchant and sorted it for each batch, so a fill took time in the square of
    the rows.  Here each part is a range of the primary key of its own, read in turn."""
    m, r, v = table.c.merchant_id, table.c.record_id, table.c.revision
    keyed = table.name == "record_revisions"  # records: one row a record, its key (m, r)
    rest = (r, v) if keyed else (r,)
    # Each range in the order of the key's columns it leaves open: MariaDB sorted a range
    # ordered by the merchant too (``merchant_id = M ... ORDER BY merchant_id, record_id``)
    # whenever the connection's collation was not the column's, a sort of the whole rest.
    if position is None:
        ranges: list[tuple[ColumnElement[bool], tuple[Any, ...]]] = [(true(), (m, *rest))]
    else:
        at_m, at_r = position.fill_merchant_id, position.fill_record_id
        ranges = [(and_(m == at_m, r > at_r), rest), (m > at_m, (m, *rest))]
        if keyed:
            ranges.insert(0, (and_(m == at_m, r == at_r, v > position.fill_revision), (v,)))
    _keyed_reads_only(conn)
    query = select(m, r, v, table.c.extra_fields)
    for dialect in MYSQL_FAMILY:
        query = query.with_hint(table, _key_hint(table.name), dialect)
    rows: list[Any] = []
    for where, order in ranges:
        rows += conn.execute(query.where(where).order_by(*order).limit(batch - len(rows))).all()
        if len(rows) >= batch:
            break
    return rows


def _key_hint(table: str) -> str:
    """MariaDB: read by the record's key (unique there, the rows clustered by ``row_id``).
    Left to choose, it reads ``merchant_id = M AND record_id > R`` as a ref on the merchant
    with the rest as a filter, from the merchant's first entry: 126 ms a batch at the
    900,000th record against 0.9 ms as a range of the key."""
    return f"FORCE INDEX ({CLUSTERED_BY_ROW_ID[table]})"


def _keyed_reads_only(conn: Connection) -> None:
    """PostgreSQL, for this transaction: ranges of the key read in its order, never sorted.
    With statistics older than the table (a warehouse just loaded, autovacuum behind) it
    estimated a range of 700,000 rows at 99 and read them all through a bitmap to sort them,
    0.7 s a batch instead of 2 ms."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SET LOCAL enable_sort = off"))
        conn.execute(text("SET LOCAL enable_bitmapscan = off"))


@dataclass(frozen=True, slots=True)
class FieldsView:
    """``fields list``: the fields recordsync knows, the promoted ones, the unknown ones."""

    promoted: list[dict[str, Any]]
    unknown: list[dict[str, Any]]


def list_fields(engine: Engine) -> FieldsView:
    s = record_field_sightings
    with engine.connect() as conn:
        promoted = [
            {str(key): value for key, value in row.items()}  # keys of plain str, not quoted_name
            for row in conn.execute(select(_P).order_by(_P.c.field)).mappings()
        ]
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
