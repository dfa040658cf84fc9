"""A migrated server database used again by the next test, once emptied back to what migrating
a new one leaves (the ``warehouse`` fixture's, see dbfixtures.py).

Creating a database per test was most of the suite's database time: PostgreSQL's DROP DATABASE
waits for a checkpoint of the whole server, MariaDB copies a template in ~45 DDL statements.
Emptying the tables of one database costs a few statements, but only a database found exactly
as migration left it may be used again, so after each test:

1. the sessions left on it are ended (a killed process's, a connection a test never closed),
   since they may hold locks the emptying would wait for, or the merchant locks the next test
   takes; a database where sessions keep coming back (a process still running) is retired;
2. every table is emptied and every counter restarted, so that ids start where a new
   database's do, and ``warehouse_identity`` gets a new id: each test's warehouse is one of
   its own, as a copy of the template made it before;
3. its schema, the schema's version rows and the server's settings for it are compared with
   what they were just after migrating (``fingerprint``); any difference (a test downgraded
   it, added a revision) retires it.

A retired database is dropped at the end of the session with the fresh ones (``Drops``).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections.abc import Callable
from typing import Final

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from recordsync.warehouse.bi import indexes as bi_indexes

# The tables migration fills: their rows are part of the schema (the version) and must be
# found as migration wrote them; the identity is drawn again instead.
_VERSION_TABLES: Final = frozenset({"recordsync_alembic_version", "schema_revisions"})
IDENTITY_TABLE: Final = "warehouse_identity"
# How long the sessions left on a database may take to go once ended.
_SESSIONS_GONE_S: Final = 10.0
_POLL_S: Final = 0.05


class Unusable(Exception):  # noqa: N818 - a verdict, not an error of the code under test
    """The database cannot be used again; the reason says why (shown when debugging)."""


def _digest(rows: object) -> str:
    return hashlib.sha256(repr(rows).encode()).hexdigest()


# -- PostgreSQL -------------------------------------------------------------------------------

_PG_SCHEMA: Final = """
SELECT 'column', c.relname, a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
       || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE n.nspname = 'public' AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'relation', c.relname, c.relkind::text || ' ' || coalesce(c.reloptions::text, '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
UNION ALL
SELECT 'index', indexname, indexdef || ' valid ' || i.indisvalid::text
  FROM pg_indexes x
  JOIN pg_class ic ON ic.relname = x.indexname
  JOIN pg_namespace n ON n.oid = ic.relnamespace AND n.nspname = x.schemaname
  JOIN pg_index i ON i.indexrelid = ic.oid
 WHERE x.schemaname = 'public'
UNION ALL
SELECT 'constraint', conrelid::regclass::text, conname || ' ' || pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = 'public'::regnamespace
UNION ALL
SELECT 'view', viewname, definition FROM pg_views WHERE schemaname = 'public'
UNION ALL
SELECT 'function', p.proname, pg_get_function_identity_arguments(p.oid)
  FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace
UNION ALL
SELECT 'trigger', tgrelid::regclass::text, tgname
  FROM pg_trigger WHERE NOT tgisinternal
UNION ALL
SELECT 'schema', nspname, '' FROM pg_namespace
 WHERE nspname NOT IN ('public', 'information_schema') AND nspname NOT LIKE 'pg\\_%'
UNION ALL
SELECT 'setting', coalesce(setrole::regrole::text, ''), array_to_string(setconfig, ',')
  FROM pg_db_role_setting WHERE setdatabase = (SELECT oid FROM pg_database
                                               WHERE datname = current_database())
ORDER BY 1, 2, 3
"""


def _pg_tables(conn: Connection) -> list[str]:
    return list(
        conn.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
        ).scalars()
    )


def _pg_end_sessions(conn: Connection, database: str) -> None:
    # Autovacuum's workers are the server's own: they give way to the emptying by themselves.
    others = (
        " FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid()"
        " AND backend_type = 'client backend'"
    )
    _until_gone(
        lambda: conn.execute(text(f"SELECT pg_terminate_backend(pid){others}"), {"db": database}),
        lambda: conn.execute(text(f"SELECT count(*){others}"), {"db": database}).scalar_one(),
    )


def _pg_fingerprint(conn: Connection) -> str:
    rows = conn.execute(text(_PG_SCHEMA)).all()
    versions = [_rows(conn, f'"{table}"') for table in sorted(_VERSION_TABLES)]
    return _digest((rows, versions))


def _pg_empty(engine: Engine) -> None:
    with engine.begin() as conn:
        tables = [t for t in _pg_tables(conn) if t not in _VERSION_TABLES]
        filled = _filled(conn, [f'"{table}"' for table in tables])
        conn.execute(text("SET LOCAL lock_timeout = '10s'"))
        if filled:
            conn.execute(text(f"TRUNCATE {', '.join(filled)} RESTART IDENTITY CASCADE"))
        for (sequence,) in conn.execute(
            text(
                "SELECT quote_ident(sequencename) FROM pg_sequences"
                " WHERE schemaname = 'public' AND last_value IS NOT NULL"
            )
        ).all():
            conn.execute(text(f"ALTER SEQUENCE {sequence} RESTART"))
        _new_identity(conn, "statement_timestamp()")


# -- MariaDB ----------------------------------------------------------------------------------

_MARIADB_SCHEMA: Final = """
SELECT 'column', table_name, concat_ws(' ', column_name, ordinal_position, column_type,
       is_nullable, column_default, collation_name, extra, generation_expression)
  FROM information_schema.columns WHERE table_schema = DATABASE()
UNION ALL
SELECT 'table', table_name, concat_ws(' ', table_type, engine, row_format, table_collation,
       create_options)
  FROM information_schema.tables WHERE table_schema = DATABASE()
UNION ALL
SELECT 'index', table_name, concat_ws(' ', index_name, non_unique, seq_in_index, column_name,
       sub_part, collation, index_type, ignored)
  FROM information_schema.statistics WHERE table_schema = DATABASE()
UNION ALL
SELECT 'constraint', table_name, concat_ws(' ', constraint_name, constraint_type)
  FROM information_schema.table_constraints WHERE table_schema = DATABASE()
UNION ALL
SELECT 'check', table_name, concat_ws(' ', constraint_name, check_clause)
  FROM information_schema.check_constraints WHERE constraint_schema = DATABASE()
UNION ALL
SELECT 'view', table_name, view_definition
  FROM information_schema.views WHERE table_schema = DATABASE()
UNION ALL
SELECT 'partition', table_name, concat_ws(' ', partition_name, partition_method,
       partition_expression, partition_description)
  FROM information_schema.partitions
 WHERE table_schema = DATABASE() AND partition_name IS NOT NULL
UNION ALL
SELECT 'routine', routine_name, routine_type
  FROM information_schema.routines WHERE routine_schema = DATABASE()
UNION ALL
SELECT 'trigger', event_object_table, trigger_name
  FROM information_schema.triggers WHERE trigger_schema = DATABASE()
ORDER BY 1, 2, 3
"""


def _mariadb_tables(conn: Connection) -> list[str]:
    return list(
        conn.execute(
            text(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' ORDER BY 1"
            )
        ).scalars()
    )


def _mariadb_end_sessions(conn: Connection, database: str) -> None:
    others = text(
        "SELECT id FROM information_schema.processlist WHERE db = :db AND id <> CONNECTION_ID()"
    )

    def end() -> None:
        for (session,) in conn.execute(others, {"db": database}).all():
            with contextlib.suppress(DBAPIError):  # gone on its own meanwhile
                conn.execute(text(f"KILL CONNECTION {int(session)}"))

    _until_gone(end, lambda: len(conn.execute(others, {"db": database}).all()))


def _mariadb_fingerprint(conn: Connection) -> str:
    rows = conn.execute(text(_MARIADB_SCHEMA)).all()
    versions = [_rows(conn, f"`{table}`") for table in sorted(_VERSION_TABLES)]
    return _digest((rows, versions))


def _mariadb_empty(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("SET SESSION lock_wait_timeout = 10, innodb_lock_wait_timeout = 10"))
        tables = [t for t in _mariadb_tables(conn) if t not in _VERSION_TABLES]
        filled = _filled(conn, [f"`{table}`" for table in tables])
        counters = conn.execute(
            text(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = DATABASE() AND auto_increment > 1"
            )
        ).scalars()
        advanced = sorted(f"`{table}`" for table in counters)
        for table in filled:
            conn.execute(text(f"DELETE FROM {table}"))
        _new_identity(conn, "UTC_TIMESTAMP(6)")
    # After the rows are gone, so that each counter goes back to 1 (InnoDB takes max + 1).
    with engine.connect() as conn:
        conn.execute(text("SET SESSION lock_wait_timeout = 10"))
        for table in advanced:
            conn.execute(text(f"ALTER TABLE {table} AUTO_INCREMENT = 1"))


# -- both -------------------------------------------------------------------------------------


def _rows(conn: Connection, table: str) -> list[tuple[object, ...]]:
    return sorted(tuple(row) for row in conn.execute(text(f"SELECT * FROM {table}")).all())


def _filled(conn: Connection, tables: list[str]) -> list[str]:
    """Those of ``tables`` that hold a row, asked in one statement."""
    if not tables:
        return []
    probes = " UNION ALL ".join(
        f"SELECT {i} AS n FROM (SELECT 1 AS one FROM {table} LIMIT 1) AS t{i}"
        for i, table in enumerate(tables)
    )
    return [tables[n] for n in conn.execute(text(probes)).scalars()]


def _new_identity(conn: Connection, now: str) -> None:
    conn.execute(text(f"DELETE FROM {IDENTITY_TABLE}"))
    conn.execute(
        text(f"INSERT INTO {IDENTITY_TABLE} (warehouse_id, created_at) VALUES (:id, {now})"),
        {"id": str(uuid.uuid4())},
    )


def _until_gone(end: Callable[[], object], count: Callable[[], int]) -> None:
    deadline = time.monotonic() + _SESSIONS_GONE_S
    while True:
        end()
        if count() == 0:
            return
        if time.monotonic() > deadline:
            raise Unusable("sessions keep coming back: a process of the test still runs")
        time.sleep(_POLL_S)


_BACKENDS: Final = {
    "postgres": (_pg_end_sessions, _pg_fingerprint, _pg_empty),
    "mariadb": (_mariadb_end_sessions, _mariadb_fingerprint, _mariadb_empty),
}


def fingerprint(kind: str, engine: Engine) -> str:
    """What must be the same for the database to be used again: schema, version rows, settings."""
    with engine.connect() as conn:
        return _BACKENDS[kind][1](conn)


def end_sessions(kind: str, admin: Engine, database: str) -> None:
    """End every session on ``database`` but the caller's (raises ``Unusable`` if they return)."""
    with admin.connect() as conn:
        _BACKENDS[kind][0](conn, database)


def empty_again(kind: str, engine: Engine, migrated: str) -> None:
    """Empty the database ``engine`` reaches, as migrating a new one leaves it; raises
    ``Unusable`` when its schema is no longer the ``migrated`` fingerprint.

    The one change of schema undone is the BI indexes a bulk load into an empty ``records``
    left out (``bi.indexes.defer``), most backfill tests' doing: built again, on the table now
    empty, by the package's own definitions, then checked like the rest."""
    _BACKENDS[kind][2](engine)
    if fingerprint(kind, engine) == migrated:
        return
    bi_indexes.build(engine, sleep=time.sleep)
    if fingerprint(kind, engine) != migrated:
        raise Unusable("its schema is not the one migrated")
