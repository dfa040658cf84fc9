"""The CLI remembers SIGTERM and SIGINT before it imports anything heavy: a stop asked for
while the daemon is still starting is never the default 'killed by signal'."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_cli_loads_no_database_or_logging_library():
    probe = (
        "import sys, recordsync.cli; "
        "print(sorted(m for m in ('sqlalchemy', 'structlog', 'httpx', 'apscheduler') "
        "if m in sys.modules))"
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
