"""The fields promoted to columns: their types, the conversion of a kept member to a column
value, and the writer's part (every page fills the promoted columns of its rows itself).

A promoted field is a typed, nullable column of ``records`` and ``record_revisions`` named as
the member, filled from ``extra_fields``: by ``promotion`` for the rows written before, and
here for every page written after, in the page's own transaction.  One conversion serves
both, so a row's column never depends on which wrote it.  A value that does not fit the type
(text where a number was promised, a number past a BIGINT) is left NULL and counted; its
raw text stays in ``extra_fields``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

import msgspec
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Engine,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
    bindparam,
    select,
    update,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.types import TypeEngine

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.core.errors import InvalidRecordError
from recordsync.core.times import parse_time
from recordsync.warehouse.pages.staging import StagedRevision
from recordsync.warehouse.schema import ID_LENGTH, promoted_fields, records
from recordsync.warehouse.types import SQLiteDecimalText, json_text, utc_datetime

# A column name the warehouse and every BI tool take unquoted.
_NAME: Final = re.compile(r"[a-z][a-z0-9_]{0,62}")
ADDING: Final = "adding"  # registered, its columns not all added yet: no writer fills it
FILLING: Final = "filling"
DONE: Final = "done"
_MEMBERS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY: Final = msgspec.json.Decoder()
_BIGINT: Final = 2**63 - 1


def _decimal_type() -> TypeEngine[Any]:
    """Any decimal, exactly: unconstrained NUMERIC, DECIMAL(65,30), decimal text on SQLite."""
    return (
        Numeric(asdecimal=True)
        .with_variant(mysql.DECIMAL(65, 30), *MYSQL_FAMILY)
        .with_variant(SQLiteDecimalText(), "sqlite")
    )


COLUMN_TYPES: Final[dict[str, Callable[[], TypeEngine[Any]]]] = {
    "decimal": _decimal_type,
    "text": Text,
    "integer": BigInteger,
    "timestamp": utc_datetime,
    "boolean": lambda: Boolean(create_constraint=False),
}


class _Unfit(Exception):  # noqa: N818 - a value that does not fit, not an error of ours
    pass


def _as_decimal(value: object, text: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _Unfit
    try:
        number = Decimal(text if not isinstance(value, str) else value)
    except InvalidOperation:
        raise _Unfit from None
    if not number.is_finite():
        raise _Unfit
    return number


def _as_integer(value: object, _text: str) -> int:
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,19}", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > _BIGINT:
        raise _Unfit
    return value


def _as_text(value: object, text: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return text  # a number as its decimal text, never through a float
    raise _Unfit


def _as_timestamp(value: object, _text: str) -> Any:
    try:
        return parse_time(value, field="value")
    except InvalidRecordError:
        raise _Unfit from None


def _as_boolean(value: object, _text: str) -> bool:
    if not isinstance(value, bool):
        raise _Unfit
    return value


_CONVERT: Final[dict[str, Callable[[object, str], Any]]] = {
    "decimal": _as_decimal,
    "text": _as_text,
    "integer": _as_integer,
    "timestamp": _as_timestamp,
    "boolean": _as_boolean,
}
TYPES: Final = tuple(COLUMN_TYPES)


def check_name(name: str) -> str | None:
    """Why ``name`` cannot be a promoted column, or None."""
    if not _NAME.fullmatch(name):
        return (
            f"{name!r}: a promoted field's name must be lower-case letters, digits and _, "
            "starting with a letter, at most 63 characters"
        )
    if name in records.c:
        return f"{name!r} is a column of records already"
    return None


@dataclass(frozen=True, slots=True)
class Promoted:
    field: str
    type: str
    state: str = FILLING


def column_value(promoted: Promoted, sent: msgspec.Raw | None) -> tuple[Any, bool]:
    """(the column's value, whether it fit) for a member's bytes; absent or null: (None, True)."""
    if sent is None:
        return None, True
    text = bytes(sent).decode()
    try:
        value = _ANY.decode(text)
    except msgspec.DecodeError:
        return None, False
    if value is None:
        return None, True
    try:
        # The number's own text: msgspec reads a long decimal as a float, the text is exact.
        return _CONVERT[promoted.type](value, text), True
    except _Unfit:
        return None, False


def row_values(promoted: Sequence[Promoted], extra_fields: str | None) -> tuple[list[Any], int]:
    """Each promoted column's value for one row's ``extra_fields``, and how many did not fit."""
    if extra_fields is None:
        return [None] * len(promoted), 0
    try:
        members = _MEMBERS.decode(extra_fields)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return [None] * len(promoted), 0
    values, unfit = [], 0
    for item in promoted:
        value, fits = column_value(item, members.get(item.field))
        values.append(value)
        unfit += not fits
    return values, unfit


def target_table(name: str, promoted: Sequence[Promoted]) -> Table:
    """``records`` or ``record_revisions`` as a promotion's statements see them: the key and
    the promoted columns, typed."""
    return Table(
        name,
        MetaData(),
        Column("merchant_id", String(ID_LENGTH)),
        Column("record_id", String(ID_LENGTH)),
        Column("revision", BigInteger),
        Column("extra_fields", json_text()),
        *(Column(item.field, COLUMN_TYPES[item.type]()) for item in promoted),
    )


def read_promoted(conn: Connection) -> list[Promoted]:
    """The promoted fields whose columns exist, as the writers fill them."""
    p = promoted_fields
    rows = conn.execute(
        select(p.c.field, p.c.type, p.c.state).where(p.c.state != ADDING).order_by(p.c.field)
    )
    return [Promoted(field, kind, state) for field, kind, state in rows]


class PromotedCache:
    """The promoted fields as the writers see them, read again at most every ``ttl`` seconds
    (a promotion waits longer than that before it fills, so every writer fills the column of
    what it writes by then)."""

    def __init__(
        self, engine: Engine, ttl: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._engine = engine
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._promoted: tuple[Promoted, ...] = ()

    def current(self) -> tuple[Promoted, ...]:
        now = self._clock()
        with self._lock:
            if self._read_at is not None and now - self._read_at < self.ttl:
                return self._promoted
        with self._engine.connect() as conn:
            found = tuple(read_promoted(conn))
        with self._lock:
            self._promoted, self._read_at = found, now
        return found


def fill_page(
    conn: Connection,
    merchant_id: str,
    staged: Sequence[StagedRevision],
    promoted: Sequence[Promoted],
) -> None:
    """The promoted columns of the rows a page just wrote, in its transaction: a row without
    the member gets NULL (a later revision replaces the whole set, as ``extra_fields``)."""
    tops, history = [], []
    for item in staged:
        record = item.record
        values, _unfit = row_values(promoted, record.extra_fields)
        row = {
            "m": merchant_id,
            "r": record.record_id,
            "v": record.revision,
            **{f"p_{n}": value for n, value in enumerate(values)},
        }
        if item.is_top:
            tops.append(row)
        if item.in_history:
            history.append(row)
    for name, rows in (("records", tops), ("record_revisions", history)):
        if rows:
            conn.execute(_row_update(name, promoted), rows)


def _row_update(name: str, promoted: Sequence[Promoted]) -> Any:
    table = target_table(name, promoted)
    return (
        update(table)
        .where(
            table.c.merchant_id == bindparam("m"),
            table.c.record_id == bindparam("r"),
            table.c.revision == bindparam("v"),
        )
        .values({item.field: bindparam(f"p_{n}") for n, item in enumerate(promoted)})
    )
