"""Turns at the database servers for the suite's parallel workers (pytest-xdist).

Most tests share the servers freely, each in its own database.  A test marked
``restarts_services`` stops and starts them, which would break whatever another worker is
doing there, so it waits until no other test runs and keeps every other test waiting until it
ends.  A plain reader-writer lock on one file would let the readers starve it (the workers
start a new test every few milliseconds), so a second file is a gate that the restarting test
closes first: a worker passes it only to start a test, never while holding it.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

# Set by pytest-xdist in every worker of one run, and the same in all of them.
RUN_ID_ENV: Final = "PYTEST_XDIST_TESTRUNUID"


@contextmanager
def _locked(path: Path, operation: int) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, operation)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def servers_turn(*, exclusive: bool, lock_dir: Path | None = None) -> Iterator[None]:
    """Hold the servers shared (most tests) or alone (``exclusive``) for one test."""
    lock_dir = lock_dir or Path(tempfile.gettempdir())
    run_id = os.environ.get(RUN_ID_ENV)
    if run_id is None:  # one process runs the tests one after the other: nothing to share
        yield
        return
    gate = lock_dir / f"recordsync-tests-{run_id}.gate"
    turn = lock_dir / f"recordsync-tests-{run_id}.turn"
    if exclusive:
        with _locked(gate, fcntl.LOCK_EX), _locked(turn, fcntl.LOCK_EX):
            yield
        return
    with _locked(gate, fcntl.LOCK_EX):
        shared = turn.open("a")
        fcntl.flock(shared, fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(shared, fcntl.LOCK_UN)
        shared.close()
