"""The file ``merchant state export`` writes holds a merchant's cursors and plan: it is its
owner's alone, and it is written through a temporary file of its own, so a file or link that
someone planted where the export goes is replaced, never written through.

Before, the export was 0644 under the usual umask 022, written through the predictable
``.FILE.PID.partial`` beside it, and a link planted at that name was followed."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from recordsync.service.commands.merchant_state import write_private

DOCUMENT = b'{"merchant_id": "brand-a", "state": {"change_cursor": "chg-0100"}}\n'


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The umask most shells start with, which left the export readable by every user."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


@pytest.mark.usefixtures("usual_umask")
def test_an_export_is_readable_by_its_owner_only(tmp_path: Path):
    path = tmp_path / "brand-a.json"
    write_private(path, DOCUMENT)
    assert path.read_bytes() == DOCUMENT
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no partial file left


@pytest.mark.usefixtures("usual_umask")
def test_an_export_writes_through_no_link_planted_at_its_path_or_beside_it(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"not yours")
    path = tmp_path / "brand-a.json"
    path.symlink_to(victim)
    # Where the partial file used to be written: this process's pid made its name known.
    planted = tmp_path / f".{path.name}.{os.getpid()}.partial"
    planted.symlink_to(victim)

    write_private(path, DOCUMENT)

    assert victim.read_bytes() == b"not yours"
    assert not path.is_symlink()  # the link is replaced by the file, not followed
    assert path.read_bytes() == DOCUMENT
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert planted.is_symlink()  # left alone
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [victim.name, path.name, planted.name]
    )
