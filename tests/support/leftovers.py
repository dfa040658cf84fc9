"""Processes a test started (commands, daemons, a previous release's replicas): one still
running when the test ends (it failed, or hung, or a ``finally`` was missed) is killed, never
left behind for the rest of the suite.  That matters beyond the machine's cores: the worker's
database is used again by the next test (dbfixtures.py), and a daemon left running would
write into it, so the database fixture kills them too before it empties the tables."""

from __future__ import annotations

import subprocess
from typing import Any

STARTED: list[subprocess.Popen[Any]] = []


def kill_left_behind() -> None:
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
