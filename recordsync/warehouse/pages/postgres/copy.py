"""PostgreSQL: a page's staged rows go in by one ``COPY`` in text format.

The page arrives as one buffer already in the format, so the driver formats nothing: it sends
the bytes.  A snapshot page comes as CSV (``copy_csv``, encoded by msgspec), any other as COPY
text (``copy_text``, where why text and not binary is told).  ``ENCODING 'UTF8'``
says what the bytes are whatever the session's client encoding.

The COPY goes to the driver directly (SQLAlchemy has no COPY), inside the caller's
transaction; the driver's errors are turned into SQLAlchemy's own so that
``connection.translate_errors`` treats a dropped server here as it does everywhere else.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, exc

from recordsync.warehouse.pages.staging import STAGE_COLUMNS, STAGE_TABLE


class StageCopy:
    """Loads a page's stage rows, in COPY text or CSV format, into the session's stage table."""

    def __init__(self) -> None:
        into = f"COPY {STAGE_TABLE} ({', '.join(STAGE_COLUMNS)}) FROM STDIN"
        self._text = f"{into} (FORMAT text, ENCODING 'UTF8')"
        self._csv = f"{into} (FORMAT csv, NULL 'null', ENCODING 'UTF8')"

    def load(self, conn: Connection, data: bytes) -> None:
        """``data`` in COPY text format (``copy_text``)."""
        self._load(conn, self._text, data)

    def load_csv(self, conn: Connection, data: bytes) -> None:
        """``data`` in CSV with ``null`` for NULL (``copy_csv``)."""
        self._load(conn, self._csv, data)

    def _load(self, conn: Connection, sql: str, data: bytes) -> None:
        with _driver_errors(conn, "COPY into the stage"):
            driver_connection: Any = conn.connection.dbapi_connection  # psycopg's Connection
            with driver_connection.cursor() as cursor, cursor.copy(sql) as copy:
                copy.write(data)


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
