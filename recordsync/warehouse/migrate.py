"""Alembic, run programmatically: no alembic.ini, the scripts found where the package is.

An installed wheel carries the scripts as ``recordsync/_migrations`` (pyproject force-includes
them); a source checkout or editable install has them at ``<repo>/migrations``.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

from recordsync.core.errors import ConfigurationError
from recordsync.warehouse.schema import VERSION_TABLE

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


def _config() -> Config:
    config = Config()
    # Config values go through configparser interpolation: a literal % must be doubled.
    config.set_main_option("script_location", str(script_location()).replace("%", "%%"))
    return config


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision; a no-op when it is already there."""
    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def head_revision() -> str | None:
    """The newest revision the installed scripts know."""
    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at; None when recordsync never migrated it."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()
