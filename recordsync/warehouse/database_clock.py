"""The database's own clock, for the fleet's bookkeeping.

Heartbeats, lease times and backfill requests are stamped with the database's ``now`` and
compared against it, never against a replica's local clock: replicas on several hosts agree on
one clock that way, and a host whose clock drifts cannot make a live replica look dead or a
dead one look live.

``database_now()`` is a SQL expression typed as an aware UTC ``datetime``: PostgreSQL's
``statement_timestamp()``, MariaDB's ``UTC_TIMESTAMP(6)`` (independent of the session's time
zone) and, on SQLite, ``strftime`` of ``'now'`` (UTC) in the fixed-width text every other time
column holds (``types.sqlite_time_text``; SQLite gives milliseconds, padded to microseconds).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.warehouse.types import utc_datetime


class database_now(FunctionElement[datetime]):  # noqa: N801 - reads as the SQL function it is
    """The database server's current time, as an aware UTC ``datetime``."""

    type = utc_datetime()
    inherit_cache = True
    name = "database_now"


@compiles(database_now, "postgresql")
def _postgres_now(_element: database_now, _compiler: SQLCompiler, **_kw: Any) -> str:
    return "statement_timestamp()"


@compiles(database_now, *MYSQL_FAMILY)
def _mysql_now(_element: database_now, _compiler: SQLCompiler, **_kw: Any) -> str:
    return "UTC_TIMESTAMP(6)"


@compiles(database_now, "sqlite")
def _sqlite_now(_element: database_now, _compiler: SQLCompiler, **_kw: Any) -> str:
    return "(strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00')"


def read_database_now(conn: Connection) -> datetime:
    """What the database's clock says now."""
    return conn.execute(select(database_now())).scalar_one()
