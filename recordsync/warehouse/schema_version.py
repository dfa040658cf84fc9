"""Where a warehouse's schema stands against this version's migration scripts, read without
Alembic.

Every process checks the schema before its first statement (a daemon, each command, each
probe's ``status --check``), and almost always finds it current.  Importing Alembic and
loading its script directory for that costs a tenth of a second of a short command's life,
so the scripts' revision ids are read from their text here (each script names its
``revision`` and ``down_revision`` on a line of its own) and Alembic is imported only to
change the schema (``migrate``).  A script this reading cannot follow (a merge, a name
computed at import) stops with an error instead of guessing; a test holds the reading equal
to Alembic's own.

An installed wheel carries the scripts as ``recordsync/_migrations`` (pyproject
force-includes them); a source checkout or editable install has them at ``<repo>/migrations``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sqlalchemy import Connection, inspect, select, text

from recordsync import __version__
from recordsync.core.errors import ConfigurationError, SchemaVersionError
from recordsync.warehouse.schema import VERSION_TABLE, schema_revisions

_PACKAGE = Path(__file__).resolve().parent.parent
# ``revision: str = "0017"`` and ``down_revision: str | Sequence[str] | None = "0016"`` (or
# ``None``), as Alembic's template writes them.
_ASSIGNED: Final = re.compile(
    r"^(?P<name>revision|down_revision)\s*(?::[^=\n]*)?=\s*(?:\"(?P<id>[^\"]+)\"|'(?P<id2>[^']+)'|(?P<none>None))\s*$",
    re.MULTILINE,
)


def script_location() -> Path:
    """The migration scripts: the installed copy first, then the source checkout's."""
    for candidate in (_PACKAGE / "_migrations", _PACKAGE.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise ConfigurationError(
        f"warehouse migration scripts not found in {_PACKAGE / '_migrations'} or "
        f"{_PACKAGE.parent / 'migrations'}: reinstall recordsync"
    )


@dataclass(frozen=True, slots=True)
class ScriptRevisions:
    """The revisions the scripts define: each one's parent, and the newest (the one no script
    builds on)."""

    parents: dict[str, str | None]
    head: str


def script_revisions(scripts: Path | None = None) -> ScriptRevisions:
    """The revisions of the scripts in ``scripts`` (this version's by default)."""
    where = script_location() if scripts is None else scripts
    parents: dict[str, str | None] = {}
    for path in sorted((where / "versions").glob("*.py")):
        found: dict[str, str | None] = {}
        for match in _ASSIGNED.finditer(path.read_text(encoding="utf-8")):
            found.setdefault(match["name"], match["id"] or match["id2"])
        if "revision" not in found or "down_revision" not in found:
            raise ConfigurationError(f"migration script {path.name}: no revision line to read")
        revision = found["revision"]
        assert revision is not None  # the pattern gives None only to down_revision = None
        parents[revision] = found["down_revision"]
    children = {parent for parent in parents.values() if parent is not None}
    heads = [revision for revision in parents if revision not in children]
    if len(heads) != 1:
        raise ConfigurationError(f"migration scripts in {where}: heads {heads}, not one")
    return ScriptRevisions(parents=parents, head=heads[0])


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


def schema_state(connection: Connection, scripts: Path | None = None) -> SchemaState:
    """Read the schema's revision; writes nothing (read commands and read-only accounts)."""
    revisions = script_revisions(scripts)
    current = current_revision(connection)
    ours = set(revisions.parents)
    known = current is None or current in ours
    additive = not known and _only_additive_above(connection, current, ours) == revisions.head
    return SchemaState(
        current=current, head=revisions.head, known=known, additive_above_head=additive
    )


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at; None when recordsync never migrated it."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()  # noqa: S608 - a constant
    if len(rows) > 1:
        raise SchemaVersionError(
            f"the warehouse's {VERSION_TABLE} holds {len(rows)} revisions ({', '.join(rows)}): "
            "recordsync keeps one; someone edited it"
        )
    return rows[0] if rows else None


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
