"""Alembic, run programmatically: no alembic.ini, the scripts found where the package is.

An installed wheel carries the scripts as ``recordsync/_migrations`` (pyproject force-includes
them); a source checkout or editable install has them at ``<repo>/migrations``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, select

from recordsync import __version__
from recordsync.core.errors import ConfigurationError, SchemaVersionError
from recordsync.warehouse.schema import VERSION_TABLE, schema_revisions
from recordsync.warehouse.schema_lock import DEFAULT_WAIT_SECONDS, schema_lock

_PACKAGE = Path(__file__).resolve().parent.parent


def script_location() -> Path:
    """The migration scripts: the installed copy first, then the source checkout's."""
    for candidate in (_PACKAGE / "_migrations", _PACKAGE.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise ConfigurationError(
        f"warehouse migration scripts not found in {_PACKAGE / '_migrations'} or "
        f"{_PACKAGE.parent / 'migrations'}: reinstall recordsync"
    )


def _config(scripts: Path | None = None) -> Config:
    config = Config()
    # Config values go through configparser interpolation: a literal % must be doubled.
    where = script_location() if scripts is None else scripts
    config.set_main_option("script_location", str(where).replace("%", "%%"))
    return config


@dataclass(frozen=True, slots=True)
class SchemaState:
    """Where a warehouse's schema stands against the migration scripts of this version."""

    current: str | None  # None: never migrated by recordsync
    head: str
    known: bool  # the current revision is one of this version's scripts (or None)
    # A revision this version does not know, but only additive ones above this version's head
    # (``schema_revisions``): a newer version migrated it, and this one may still run on it.
    additive_above_head: bool = False

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head or self.additive_above_head

    def problem(self) -> SchemaVersionError | None:
        """Why this version cannot use the schema as it is, or None when it can."""
        if self.up_to_date:
            return None
        if not self.known:
            return SchemaVersionError(
                f"the warehouse schema is at revision {self.current}, which this recordsync "
                f"({__version__}, newest revision {self.head}) does not know: a newer recordsync "
                "migrated it; run that version, or upgrade this one"
            )
        return SchemaVersionError(
            f"the warehouse schema is at revision {self.current or 'none (never migrated)'}; "
            f"this recordsync reads revision {self.head}: run `recordsync migrate` (with an "
            "account that may change the schema), then try again"
        )


def schema_state(connection: Connection, config: Config | None = None) -> SchemaState:
    """Read the schema's revision; writes nothing (read commands and read-only accounts)."""
    scripts = ScriptDirectory.from_config(config or _config())
    head = scripts.get_current_head()
    assert head is not None
    current = current_revision(connection)
    ours = {script.revision for script in scripts.walk_revisions()}
    known = current is None or current in ours
    additive = not known and _only_additive_above(connection, current, ours) == head
    return SchemaState(current=current, head=head, known=known, additive_above_head=additive)


def _only_additive_above(connection: Connection, current: str | None, ours: set[str]) -> str | None:
    """The revision of ours that ``current`` rests on through additive revisions only, as the
    database's ``schema_revisions`` rows say (written by the version that applied them); None
    when one of them is not additive, or not described."""
    if not inspect(connection).has_table(schema_revisions.name):
        return None
    described = {
        row.revision: row
        for row in connection.execute(
            select(
                schema_revisions.c.revision,
                schema_revisions.c.down_revision,
                schema_revisions.c.additive,
            )
        )
    }
    revision = current
    while revision is not None and revision not in ours:
        row = described.pop(revision, None)  # popped: a cycle in the rows ends the walk
        if row is None or not row.additive:
            return None
        revision = row.down_revision
    return revision


def upgrade(
    engine: Engine,
    revision: str = "head",
    *,
    lock_wait: float = DEFAULT_WAIT_SECONDS,
    scripts: Path | None = None,
) -> None:
    """Bring the schema to ``revision`` (the newest by default); a no-op when it is there.

    A schema at a revision this version does not know (migrated by a newer recordsync) is
    refused before Alembic touches it, with ``SchemaVersionError``: a daemon must say so once
    and stop, not retry or crash-loop.  The upgrade runs under the warehouse's schema lock
    (``schema_lock``), so that processes started together upgrade it once, one after the
    other finding it current; a schema already current takes no lock at all.  The revisions
    are applied one at a time, the lock checked before each (``SchemaLock.check``): an
    upgrade whose lock was lost stops with ``SchemaLockLostError`` before its next revision.
    ``scripts``: another copy of the scripts (tests add a revision of their own to one).
    """
    config = _config(scripts)
    with engine.connect() as connection:
        if _current_enough(schema_state(connection, config), revision):
            return
    with schema_lock(engine, wait=lock_wait) as lock, engine.begin() as connection:
        state = schema_state(connection, config)  # again: another process may have upgraded
        if _current_enough(state, revision):
            return
        config.attributes["connection"] = connection
        for step in _steps(config, state.current, revision):
            lock.check()
            command.upgrade(config, step)


def _steps(config: Config, current: str | None, revision: str) -> list[str]:
    """The revisions from ``current`` (exclusive) up to ``revision``, oldest first."""
    scripts = ScriptDirectory.from_config(config)
    steps = [script.revision for script in scripts.iterate_revisions(revision, current or "base")]
    return [step for step in reversed(steps) if step != current]


def _current_enough(state: SchemaState, revision: str) -> bool:
    """Nothing to do: the schema is at the head asked for, or above it by additive revisions
    only (never taken down); raises for an unknown one that is not additive."""
    if state.additive_above_head:
        return True
    if not state.known:
        problem = state.problem()
        assert problem is not None
        raise problem
    return revision == "head" and state.up_to_date


def head_revision() -> str | None:
    """The newest revision the installed scripts know."""
    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at; None when recordsync never migrated it."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()
