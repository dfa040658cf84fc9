"""Alembic, run programmatically: no alembic.ini, the scripts found where the package is
(``schema_version.script_location``).  Only a schema change imports this module's Alembic:
reading where the schema stands is ``schema_version``'s, which every process does first.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from recordsync.warehouse.schema_lock import DEFAULT_WAIT_SECONDS, schema_lock
from recordsync.warehouse.schema_version import (
    SchemaState,
    current_revision,
    schema_state,
    script_location,
)

__all__ = [
    "SchemaState",
    "current_revision",
    "head_revision",
    "schema_state",
    "script_location",
    "upgrade",
]


def _config(scripts: Path | None = None) -> Config:
    config = Config()
    # Config values go through configparser interpolation: a literal % must be doubled.
    where = script_location() if scripts is None else scripts
    config.set_main_option("script_location", str(where).replace("%", "%%"))
    return config


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
        if _current_enough(schema_state(connection, scripts), revision):
            return
    with schema_lock(engine, wait=lock_wait) as lock, engine.begin() as connection:
        state = schema_state(connection, scripts)  # again: another process may have upgraded
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
