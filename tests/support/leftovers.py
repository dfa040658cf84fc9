"""Commands a test started in a subprocess: one still running when the test ends (it failed,
or hung) is killed, never left behind for the rest of the suite."""

from __future__ import annotations

import subprocess

STARTED: list[subprocess.Popen[str]] = []


def kill_left_behind() -> None:
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
