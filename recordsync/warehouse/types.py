"""Exact column types: money never passes through a float, times are always aware UTC.

Money (spec: Conventions, Money; Record).  Amounts are exact decimal strings with at most 4
fraction digits.  A single transaction is at most 999999999999.9999, but record amounts are
cumulative, so the columns are wider than that:

- PostgreSQL: ``NUMERIC(30,4)``; MariaDB: ``DECIMAL(30,4)``.  Both store the value exactly and
  the drivers (psycopg, PyMySQL) hand back ``Decimal`` natively, so no Python conversion runs
  on the hot path.  The server normalises the scale (``10.5`` comes back as ``10.5000``): the
  same number, which is what BI sums need.
- SQLite: ``TEXT`` holding the platform's decimal string exactly as sent.  SQLite has no
  exact decimal type: its NUMERIC affinity and SQLAlchemy's ``Numeric`` both go through a
  64-bit float, which cannot hold 1999999999999.9998.  ``Decimal("10.50")`` keeps its exponent,
  so binding ``str(Decimal)`` stores ``"10.50"`` and reading it back gives the original string.
  For ad hoc SQL on SQLite, ``CAST(bet_amount AS REAL)`` works but is approximate.

Money as integers (``records.*_units``, revision 0003).  SQLite's ``SUM`` over text converts
each value to a float, so a sum of amounts is not exact there.  Each amount is therefore also
stored as an integer count of 10**-4 (``money_units``: ``12.5`` -> ``125000``) in a BIGINT, on
every backend alike, and SQLite's BI views sum those integers.  64 bits hold any amount up to
+-922337203685477.5807 (922 times the spec's per-transaction maximum); beyond that the units
are NULL and SQLite's views answer NULL rather than an inexact sum (PostgreSQL and MariaDB sum
the NUMERIC columns themselves and are exact over the columns' whole range).

Times (spec: Conventions, Time).  Every value is UTC and comes back as an aware UTC
``datetime`` on every backend; a naive value is refused on the way in, since its zone is
unknown and guessing would shift records across window boundaries.

- PostgreSQL: ``TIMESTAMP WITH TIME ZONE`` (the driver returns the session's zone; we convert).
- MariaDB: ``DATETIME(6)`` holding UTC (the session ``time_zone`` is also set to ``+00:00``
  on connect, so ``NOW()`` in ad hoc SQL agrees).
- SQLite: fixed-width ISO-8601 text ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``, which sorts
  chronologically as text and which SQLite's own date functions understand.

Each backend gets its own small ``TypeDecorator`` (combined with ``with_variant``) so that the
per-value work is one short function with no branching on the dialect.  The record upsert, the
hot path, skips SQLAlchemy's per-value processing and calls the same conversion functions
itself (``upsert.py``), so both paths store identical text.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Context, Decimal
from typing import Any, Final

import msgspec
from sqlalchemy import BigInteger, Date, Integer, Numeric, String, Text, cast
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from recordsync.core.database_url import MYSQL_FAMILY

MONEY_PRECISION: Final = 30
MONEY_SCALE: Final = 4
CURSOR_LENGTH: Final = 4096  # spec: Records, "cursor: max length 4096"
UNITS_PER_MONEY: Final = 10**MONEY_SCALE
MAX_UNITS: Final = 2**63 - 1  # BIGINT
# Wide enough that scaling any NUMERIC(30,4) value by 10**4 never rounds.
_UNITS_CONTEXT: Final = Context(prec=MONEY_PRECISION + MONEY_SCALE + 2)


def money_units(amount: Decimal) -> int | None:
    """``amount`` in integer units of 10**-4, or None when that exceeds a BIGINT.

    Exact: amounts carry at most 4 fraction digits (spec: Conventions, Money; checked by
    ``recordsync.core.money``), so the scaled value is an integer.
    """
    units = int(amount.scaleb(MONEY_SCALE, _UNITS_CONTEXT))
    return units if -MAX_UNITS <= units <= MAX_UNITS else None


class SQLiteDecimalText(TypeDecorator[Decimal]):
    """SQLite only: the decimal string exactly as sent, back as the same ``Decimal``."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Decimal | None, _dialect: Dialect) -> str | None:
        if value is None:
            return None
        if type(value) is not Decimal:
            raise TypeError(f"money must be a Decimal, got {type(value).__name__}")
        return str(value)

    def process_result_value(self, value: str | None, _dialect: Dialect) -> Decimal | None:
        return None if value is None else Decimal(value)


def aware_utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive value is refused, since its zone is unknown."""
    if value.tzinfo is UTC:
        return value
    if value.tzinfo is None:
        raise ValueError("refusing to store a naive datetime: its zone is unknown")
    return value.astimezone(UTC)


def sqlite_time_text(value: datetime) -> str:
    """``2024-03-01T00:01:00.000000+00:00``: fixed width, so text order is time order."""
    return aware_utc(value).isoformat(timespec="microseconds")


def mysql_time_text(value: datetime) -> str:
    """``2024-03-01 00:01:00.000000`` in UTC, the literal DATETIME(6) reads fastest.

    Times in UTC already (what the parser gives) lose their fixed ``+00:00`` by slicing,
    three times per record in MariaDB's page writer, a third cheaper than a ``replace``.
    """
    if value.tzinfo is UTC:
        return value.isoformat(" ", "microseconds")[:-6]
    return aware_utc(value).replace(tzinfo=None).isoformat(" ", "microseconds")


# -- a page's times at once ------------------------------------------------------------------
#
# ``isoformat`` costs 2.7 to 3.6 us a call on this project's VM, and the page writers of SQLite
# and MariaDB called it three or four times a record.  msgspec renders a whole list of times
# in C (``to_builtins``, about 0.03 us each): ``2024-03-01T00:01:00.123456Z`` for a UTC time
# with a fraction, the only form 27 characters long, sliced here into the backend's own; a
# time in any other form (no fraction, another offset, or naive, which is refused) takes the
# one-value function, so both give the same text (``bench/write_path.py`` times both).
_UTC_WITH_FRACTION: Final = len("2024-03-01T00:01:00.123456Z")


def sqlite_time_texts(values: Sequence[datetime | None]) -> list[str | None]:
    """``sqlite_time_text`` of each value (None stays None), a page at a time."""
    rendered: list[str | None] = msgspec.to_builtins(values)
    return [
        None
        if text is None
        else text[:26] + "+00:00"
        if len(text) == _UTC_WITH_FRACTION
        else sqlite_time_text(value)  # type: ignore[arg-type]
        for text, value in zip(rendered, values, strict=True)
    ]


def mysql_time_literals(values: Sequence[datetime | None]) -> list[str]:
    """Each value as a quoted ``mysql_time_text`` literal, ``NULL`` for None, a page at a
    time."""
    rendered: list[str | None] = msgspec.to_builtins(values)
    return [
        "NULL"
        if text is None
        else f"'{text[:10]} {text[11:26]}'"
        if len(text) == _UTC_WITH_FRACTION
        else f"'{mysql_time_text(value)}'"  # type: ignore[arg-type]
        for text, value in zip(rendered, values, strict=True)
    ]


class PostgresUTCDateTime(TypeDecorator[datetime]):
    """PostgreSQL: ``TIMESTAMP WITH TIME ZONE``, read back in UTC whatever the session zone."""

    impl = postgresql.TIMESTAMP
    cache_ok = True

    def __init__(self) -> None:
        super().__init__(timezone=True)

    def process_bind_param(self, value: datetime | None, _dialect: Dialect) -> datetime | None:
        return None if value is None else aware_utc(value)

    def process_result_value(self, value: datetime | None, _dialect: Dialect) -> datetime | None:
        return None if value is None else value.astimezone(UTC)


class MySQLUTCDateTime(TypeDecorator[datetime]):
    """MariaDB: ``DATETIME(6)`` holding naive UTC; aware on the Python side."""

    impl = mysql.DATETIME
    cache_ok = True

    def __init__(self) -> None:
        super().__init__(fsp=6)

    def process_bind_param(self, value: datetime | None, _dialect: Dialect) -> datetime | None:
        return None if value is None else aware_utc(value).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, _dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class SQLiteUTCText(TypeDecorator[datetime]):
    """SQLite: fixed-width ISO-8601 UTC text, so text order is time order."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: datetime | None, _dialect: Dialect) -> str | None:
        return None if value is None else sqlite_time_text(value)

    def process_result_value(self, value: str | None, _dialect: Dialect) -> datetime | None:
        return None if value is None else datetime.fromisoformat(value)


class SQLiteDateText(TypeDecorator[date]):
    """SQLite: a UTC day as ``YYYY-MM-DD`` text, what ``substr(created_at, 1, 10)`` gives."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: date | None, _dialect: Dialect) -> str | None:
        return None if value is None else value.isoformat()

    def process_result_value(self, value: str | None, _dialect: Dialect) -> date | None:
        return None if value is None else date.fromisoformat(value)


def exact_decimal() -> TypeEngine[Decimal]:
    """NUMERIC(30,4) / DECIMAL(30,4); decimal text on SQLite."""
    return Numeric(MONEY_PRECISION, MONEY_SCALE, asdecimal=True).with_variant(
        SQLiteDecimalText(), "sqlite"
    )


def utc_datetime() -> TypeEngine[datetime]:
    """An aware UTC datetime on every supported backend."""
    return (
        SQLiteUTCText()
        .with_variant(PostgresUTCDateTime(), "postgresql")
        .with_variant(MySQLUTCDateTime(), *MYSQL_FAMILY)
    )


def utc_day() -> TypeEngine[date]:
    """A UTC calendar day: DATE on PostgreSQL and MariaDB, ``YYYY-MM-DD`` text on SQLite."""
    return Date().with_variant(SQLiteDateText(), "sqlite")


def cursor_text() -> TypeEngine[str]:
    """Holds a 4096-character cursor: VARCHAR(4096) on PostgreSQL, TEXT elsewhere.

    MariaDB's VARCHAR(4096) in utf8mb4 would eat 16 KiB of the 64 KiB row limit, so TEXT.
    """
    return Text().with_variant(String(CURSOR_LENGTH), "postgresql")


def large_text() -> TypeEngine[str]:
    """Unbounded text for raw JSON: TEXT on PostgreSQL and SQLite, LONGTEXT on MariaDB."""
    return Text().with_variant(mysql.LONGTEXT(), *MYSQL_FAMILY)


def big_id() -> TypeEngine[int]:
    """A surrogate key: BIGINT, but INTEGER on SQLite, where only that is the rowid alias."""
    return BigInteger().with_variant(Integer(), "sqlite")


class _JsonAsText(TypeDecorator[str]):
    """A JSON column read and written as its text, never through a JSON library.

    The drivers' JSON handling (psycopg's loads, SQLAlchemy's JSON types) reads a number
    into a float; ``extra_fields`` holds the platform's numbers as their decimal text, so
    the value goes in as text the server parses (PostgreSQL ``CAST(... AS JSONB)``) and comes
    back as text (``CAST(... AS TEXT)``): the same on every backend.
    """

    impl = Text
    cache_ok = True

    def __init__(self, spelled: TypeEngine[Any], backend: str) -> None:
        super().__init__()
        self._spelled = spelled
        self._backend = backend

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return self._spelled

    def bind_processor(self, dialect: Dialect) -> None:
        return None

    def result_processor(self, dialect: Dialect, coltype: object) -> None:
        return None

    def bind_expression(self, bindvalue: Any) -> Any:
        if self._backend == "postgresql":
            return cast(bindvalue, postgresql.JSONB)
        return bindvalue

    def column_expression(self, column: Any) -> Any:
        if self._backend == "postgresql":
            return cast(column, Text)
        return column


def json_text() -> TypeEngine[str]:
    """A JSON document kept as its text: ``jsonb`` on PostgreSQL, ``JSON`` on MariaDB (its
    ``LONGTEXT`` checked valid), ``TEXT`` on SQLite (see ``_JsonAsText``)."""
    return (
        Text()
        .with_variant(_JsonAsText(postgresql.JSONB(), "postgresql"), "postgresql")
        .with_variant(_JsonAsText(mysql.JSON(), "mysql"), *MYSQL_FAMILY)
    )
