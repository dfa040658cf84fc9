"""The schema's revisions read from the scripts' text are the ones Alembic itself finds, so a
process that checks the schema without importing Alembic decides as Alembic would."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from support.next_revision import NEXT_REVISION, next_version_scripts

from recordsync.core.errors import ConfigurationError
from recordsync.warehouse.schema_version import script_location, script_revisions


def _alembic(scripts: Path) -> tuple[dict[str, str | None], str | None]:
    config = Config()
    config.set_main_option("script_location", str(scripts))
    directory = ScriptDirectory.from_config(config)
    parents = {}
    for script in directory.walk_revisions():
        down = script.down_revision
        assert down is None or isinstance(down, str)
        parents[script.revision] = down
    return parents, directory.get_current_head()


def test_this_versions_scripts_read_as_alembic_reads_them() -> None:
    revisions = script_revisions()
    parents, head = _alembic(script_location())
    assert revisions.parents == parents
    assert revisions.head == head
    assert len(parents) >= 17


def test_a_next_versions_script_without_annotations_is_read_too(tmp_path: Path) -> None:
    scripts = next_version_scripts(tmp_path, additive=True)
    revisions = script_revisions(scripts)
    assert revisions.head == NEXT_REVISION
    assert (revisions.parents, revisions.head) == _alembic(scripts)


def test_scripts_with_two_heads_or_an_unreadable_revision_are_refused(tmp_path: Path) -> None:
    scripts = next_version_scripts(tmp_path, additive=True)
    second = scripts / "versions" / "9002_beside.py"
    second.write_text(
        (scripts / "versions" / f"{NEXT_REVISION}_next_version.py")
        .read_text()
        .replace(f'revision = "{NEXT_REVISION}"', 'revision = "9002"')
    )
    with pytest.raises(ConfigurationError, match="not one"):
        script_revisions(scripts)
    second.write_text("revision = compute()\ndown_revision = None\n")
    with pytest.raises(ConfigurationError, match=r"9002_beside\.py"):
        script_revisions(scripts)
