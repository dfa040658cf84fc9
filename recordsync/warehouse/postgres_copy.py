"""PostgreSQL: a page's staged rows go in by binary ``COPY``.

Binary, not text: the server then parses no numeric or timestamp text and the client formats
none, which halved both sides' CPU for loading the stage in ``bench/write_path.py`` (text
about 20 us per record of wall time, binary about 11).  Binary COPY carries no type per
field, so the types are declared once from the stage table's own columns; a column type
not in the table below fails at start-up, not in the middle of a sync.

The COPY goes to the driver directly (SQLAlchemy has no COPY), inside the caller's
transaction; the driver's errors are turned into SQLAlchemy's own so that
``connection.translate_errors`` treats a dropped server here as it does everywhere else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from sqlalchemy import Connection, exc
from sqlalchemy.dialects import postgresql

from recordsync.warehouse.staging import STAGE_TABLE, stage

# The stage's column types as PostgreSQL spells them, and the binary format each is sent in
# (varchar's binary form is text's).
_BINARY_TYPES: Final = (
    ("VARCHAR", "text"),
    ("TEXT", "text"),
    ("BIGINT", "int8"),
    ("NUMERIC", "numeric"),
    ("TIMESTAMP WITH TIME ZONE", "timestamptz"),
    ("BOOLEAN", "bool"),
)


def binary_types() -> list[str]:
    """The binary COPY type of every stage column, in the encoders' column order."""
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    found = []
    for column in stage.columns:
        spelled = column.type.compile(dialect=dialect)
        kind = next((name for prefix, name in _BINARY_TYPES if spelled.startswith(prefix)), None)
        if kind is None:
            raise RuntimeError(f"no binary COPY type for stage column {column.name} ({spelled})")
        found.append(kind)
    return found


class StageCopy:
    """Loads encoded stage rows into the session's stage table by binary COPY."""

    def __init__(self) -> None:
        columns = ", ".join(column.name for column in stage.columns)
        self._sql = f"COPY {STAGE_TABLE} ({columns}) FROM STDIN (FORMAT BINARY)"
        self._types = binary_types()

    def load(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        with _driver_errors(conn, "COPY into the stage"):
            driver_connection: Any = conn.connection.dbapi_connection  # psycopg's Connection
            with driver_connection.cursor() as cursor, cursor.copy(self._sql) as copy:
                copy.set_types(self._types)
                for row in rows:
                    copy.write_row(row)


@contextmanager
def _driver_errors(conn: Connection, action: str) -> Iterator[None]:
    """The driver's own errors as SQLAlchemy's; a dead connection is invalidated, so it does
    not go back to the pool."""
    dbapi = conn.dialect.loaded_dbapi
    try:
        yield
    except dbapi.Error as error:
        dbapi_connection = conn.connection.dbapi_connection
        invalidated = conn.dialect.is_disconnect(error, dbapi_connection, None)
        if invalidated:
            conn.invalidate(error)
        raise exc.DBAPIError.instance(
            action, None, error, dbapi.Error, connection_invalidated=invalidated
        ) from error
