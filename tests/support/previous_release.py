"""The previous release of this repository, checked out from git, as a real peer: its
``recordsync`` package and migrations extracted into a folder, run with this interpreter and
its installed dependencies (``PYTHONPATH`` puts its package before this checkout's)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Final

import pytest

from support.leftovers import STARTED

# The last commit that landed before revision 0014 (schema 0013): what the replicas of a
# rolling upgrade run until they are replaced, for the commands that older replicas cannot obey.
PREVIOUS_RELEASE: Final = "73fb19c"
PREVIOUS_REVISION: Final = "0013"
# The last commit that landed on schema 0014, which runs on additive revisions above its head.
LAST_RELEASE: Final = "4d9394d"
LAST_REVISION: Final = "0014"
_REPO: Final = Path(__file__).resolve().parents[2]


def previous_release(where: Path, commit: str = PREVIOUS_RELEASE) -> Path:
    """The package and migrations of the release at ``commit`` under ``where``; skipped where
    this is not a git checkout with that commit (an unpacked archive)."""
    try:
        archive = subprocess.run(  # noqa: S603 - git, fixed arguments
            [  # noqa: S607 - git from PATH, as a developer runs it
                "git",
                "-C",
                str(_REPO),
                "archive",
                "--format=tar",
                commit,
                "recordsync",
                "migrations",
            ],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"the release {commit} is not in git here: {exc}")
    target = where / f"release-{commit}"
    target.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


def run_in_release(checkout: Path, script: str, *args: str, stdin: bytes = b"") -> None:
    """``script`` run by this interpreter with the release in ``checkout`` imported as
    ``recordsync``: what that release wrote, written by its own code; its output in the
    failure when it fails."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(  # noqa: S603 - our own interpreter and a script of the tests
        [sys.executable, "-c", script, *args],
        env=env,
        input=stdin,
        capture_output=True,
        cwd=checkout,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]


def start_previous(checkout: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``recordsync ARGS`` of the previous release, its output in ``log``; killed at the end
    of the test if it still runs then (``leftovers``)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with log.open("ab") as sink:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "recordsync", *args],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=checkout,
        )
    STARTED.append(process)
    return process
