"""Alembic environment of the recordsync warehouse.

recordsync runs its migrations itself (``Warehouse.migrate()``) and hands Alembic the open
connection in ``config.attributes["connection"]``: the engine's session settings (SQLite WAL and
busy timeout, MariaDB utf8mb4 and UTC) then apply to the DDL too.  Run by other means, the URL is
read from the ``sqlalchemy.url`` option.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine, insert, inspect, pool, select

from recordsync.warehouse.schema import VERSION_TABLE, metadata, schema_revisions

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
        _record_revisions(connection)


def _record_revisions(connection: Connection) -> None:
    """One ``schema_revisions`` row for each revision up to the one now applied, with its
    script's ``additive`` flag (a script without one is taken as not additive): what a
    replica of an older version reads to know whether it may run on this schema."""
    if not inspect(connection).has_table(schema_revisions.name):
        return  # below revision 0014
    applied = context.get_context().get_current_revision()
    known = set(connection.execute(select(schema_revisions.c.revision)).scalars())
    rows = []
    for script in context.script.iterate_revisions(applied, "base"):
        if script.revision in known:
            continue
        down = script.down_revision
        rows.append(
            {
                "revision": script.revision,
                "down_revision": down if isinstance(down, str) else None,
                "additive": bool(getattr(script.module, "additive", False)),
            }
        )
    if rows:
        connection.execute(insert(schema_revisions), rows)


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("set sqlalchemy.url, or run migrations through Warehouse.migrate()")
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.begin() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
