"""A revision of the schema newer than this version's head, for the rolling-upgrade tests: the
scripts of this checkout copied beside one more, as the next version of recordsync would ship
them, applied by Alembic with those scripts (not by the code under test).

``additive=True`` adds a table and a nullable column of ``records``, as the next version's
additive revision would; ``additive=False`` renames nothing but says it is not additive, which
is all a replica of this version may go by."""

from __future__ import annotations

import shutil
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, pool

from recordsync.warehouse.migrate import head_revision, script_location

NEXT_REVISION = "9001"

_SCRIPT = '''"""A test-only revision after this version's head."""

import sqlalchemy as sa
from alembic import op

revision = "{revision}"
down_revision = "{down}"
branch_labels = None
depends_on = None
additive = {additive}


def upgrade():
    op.create_table(
        "next_version_notes",
        sa.Column("note_id", sa.Integer(), primary_key=True),
        sa.Column("note", sa.Text(), nullable=True),
    )
    with op.batch_alter_table("records") as batch:
        batch.add_column(sa.Column("next_version_note", sa.String(64), nullable=True))


def downgrade():
    with op.batch_alter_table("records") as batch:
        batch.drop_column("next_version_note")
    op.drop_table("next_version_notes")
'''


def next_version_scripts(where: Path, *, additive: bool) -> Path:
    """This version's scripts and the next one's revision, under ``where``."""
    target = where / "next-migrations"
    shutil.copytree(script_location(), target, ignore=shutil.ignore_patterns("__pycache__"))
    (target / "versions" / f"{NEXT_REVISION}_next_version.py").write_text(
        _SCRIPT.format(revision=NEXT_REVISION, down=head_revision(), additive=additive)
    )
    return target


def apply_next_revision(url: str, where: Path, *, additive: bool = True) -> None:
    """Migrate the warehouse at ``url`` (at this version's head) to the next revision."""
    config = Config()
    config.set_main_option("script_location", str(next_version_scripts(where, additive=additive)))
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, NEXT_REVISION)
    finally:
        engine.dispose()
